-- A job whose retry policy is the one `rows.IMPLIED_RETRY_POLICY` names stores NULL in
-- `retry_policy`: the JSON object took 112 of a one-off job's ~300-byte row, written in each
-- of its versions (its insert and its completion) and in every version of a cron job's row,
-- 4.6 % of the WAL an execution writes (measured: docs/performance.md). NULL means exactly that
-- policy (5 attempts, 1 s initial, 300 s at most) for as long as such rows exist: a change of
-- the model's defaults stores its new default in full. Rows written before stay as they are.
ALTER TABLE jobs ALTER COLUMN retry_policy DROP NOT NULL;
COMMENT ON COLUMN jobs.retry_policy IS
    'NULL: {"max_attempts": 5, "initial_interval_seconds": 1.0, "max_interval_seconds": 300.0}';

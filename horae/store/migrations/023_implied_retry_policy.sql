-- A job's `retry_policy` stores only the fields whose values differ from the policy
-- `rows.IMPLIED_RETRY_POLICY` names (5 attempts, 1 s initial, 300 s at most): `{}` for a job
-- that names none, 8 bytes where the whole object took 112 of a one-off job's ~300-byte row,
-- in each of its versions (its insert and its completion) and every version of a cron job's
-- row, 4.7 % of the WAL an execution writes (measured: docs/performance.md). Every release
-- reads the column with `RetryPolicy.model_validate`, whose defaults have been those values
-- from the first, so an older release (a rollback) reads the same policy. Rows written
-- before keep every field. Nothing else changes: this migration only says so.
COMMENT ON COLUMN jobs.retry_policy IS
    'fields absent: {"max_attempts": 5, "initial_interval_seconds": 1.0, "max_interval_seconds": 300.0}';

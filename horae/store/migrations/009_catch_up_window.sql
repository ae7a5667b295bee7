-- Catch-up after any gap (docs/architecture.md, "Catch-up"): a third policy, `All` (replay
-- every missed occurrence within the window, up to a cap), and the window itself: how far
-- back a missed occurrence is still run, in seconds (NULL: no limit; at most 31 days).
-- New jobs default to `Latest`, as a CronJob runs its most recent missed schedule; existing
-- jobs keep the policy they were stored with.

ALTER TABLE jobs DROP CONSTRAINT jobs_catch_up_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_catch_up_check
    CHECK (catch_up IN ('Skip', 'Latest', 'All'));
ALTER TABLE jobs ALTER COLUMN catch_up SET DEFAULT 'Latest';
ALTER TABLE jobs ADD COLUMN catch_up_window_seconds integer
    CHECK (catch_up_window_seconds BETWEEN 1 AND 2678400);

GRANT UPDATE (catch_up_window_seconds) ON jobs TO horae_api, horae_operator;

-- Overlap policies: a job's concurrency_policy may be BufferOne (one occurrence waits, still
-- `scheduled`, behind the running one; one due while another waits is skipped, kind
-- `buffer_one`). Executions copy the policy from their job, so only the job's CHECK lists
-- the values.

ALTER TABLE jobs DROP CONSTRAINT jobs_concurrency_policy_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_concurrency_policy_check
    CHECK (concurrency_policy IN ('Allow', 'Forbid', 'Replace', 'BufferOne'));

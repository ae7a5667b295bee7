-- name: insert_job
-- Insert a new job; the caller inserts its first execution in the same transaction.
INSERT INTO jobs (id, tenant, name, source, task, payload, run_at, cron, time_zone,
                  jitter_seconds, retry_policy, timeout_seconds, concurrency_policy,
                  starting_deadline_seconds, state, shard, next_run_at,
                  idempotency_key, request_hash, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $20)

-- name: get_job
-- One job by id within a tenant (NULL tenant: any tenant).
SELECT * FROM jobs WHERE id = $1 AND ($2::text IS NULL OR tenant = $2)

-- name: get_job_for_update
-- One job by id, locked for the rest of the transaction.
SELECT * FROM jobs WHERE id = $1 FOR UPDATE

-- name: update_job_spec
-- Replace a job's spec and bump its version (an edit).
UPDATE jobs SET task = $2, payload = $3, run_at = $4, cron = $5, time_zone = $6,
       jitter_seconds = $7, retry_policy = $8, timeout_seconds = $9,
       concurrency_policy = $10, starting_deadline_seconds = $11,
       spec_version = spec_version + 1, next_run_at = $12, updated_at = $13,
       state = CASE WHEN state = 'completed' THEN 'active'::job_state ELSE state END
WHERE id = $1
RETURNING spec_version, state

-- name: set_job_state
-- Move a job to a new state and record its next run.
UPDATE jobs SET state = $2, next_run_at = $3, updated_at = $4 WHERE id = $1

-- name: notify_shard
-- Tell the scheduler owning a shard that a near-term execution was inserted.
SELECT pg_notify('horae_shard_' || ($1::int)::text, $2::text)

-- name: notify_job
-- Tell operators that a job's executions changed (status mirrors).
SELECT pg_notify('horae_job_events', $1::text)

-- name: live_crd_job
-- The live (not cancelled) job of a ScheduledJob by namespace and name.
SELECT id FROM jobs WHERE tenant = $1 AND name = $2 AND source = 'crd' AND state <> 'cancelled'

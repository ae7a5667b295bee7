-- name: insert_execution
-- Schedule one execution (deadline and policy copied from its job); a nominal occurrence
-- already scheduled is left alone.
INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,
                        job_version, status, created_at, starting_deadline_seconds,
                        concurrency_policy)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, 'scheduled', $10, j.starting_deadline_seconds,
       j.concurrency_policy
FROM jobs j WHERE j.id = $2
ON CONFLICT (job_id, occurrence_at, due_at, shard) WHERE attempt = 1 AND status <> 'cancelled'
DO NOTHING
RETURNING id

-- name: insert_skipped
-- Record a nominal occurrence that did not run, with why, unless it already has a row.
INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,
                        job_version, status, created_at, finished_at, error_kind, error_message)
SELECT $1, $2, $3, $4, $5, $6, $6, 1, $7, 'skipped', $8, $8, $9, $10
WHERE NOT EXISTS (SELECT 1 FROM executions WHERE job_id = $2 AND occurrence_at = $6
                  AND attempt = 1 AND status <> 'cancelled')

-- name: cancel_pending
-- Cancel a job's executions that have not been dispatched yet, recording why.
UPDATE executions SET status = 'cancelled', finished_at = $2, error_kind = $3,
       error_message = $4
WHERE job_id = $1 AND status = 'scheduled'

-- name: preload_due
-- Pending executions of the given shards due before $2, after the cursor ($3, $4), in due order (hot path).
SELECT id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,
       starting_deadline_seconds, concurrency_policy
FROM executions
WHERE shard = ANY($1::smallint[]) AND status = 'scheduled' AND due_at < $2
  AND due_at >= $3::timestamptz  -- redundant with the next line, but lets partitions be pruned
  AND (due_at, id) > ($3::timestamptz, $4::uuid)
ORDER BY due_at, id
LIMIT $5

-- name: take_shard
-- Bump a shard's fencing epoch as a new owner takes it; returns the new epoch.
INSERT INTO shard_epochs AS s (shard, epoch, owner, taken_at) VALUES ($1, 1, $2, $3)
ON CONFLICT (shard) DO UPDATE SET epoch = s.epoch + 1, owner = $2, taken_at = $3
RETURNING epoch

-- name: lock_epoch
-- Fence: hold our epoch of a shard for the rest of the transaction; no row when it moved on.
SELECT epoch FROM shard_epochs WHERE shard = $1 AND epoch = $2 FOR SHARE

-- name: mark_queued
-- Fenced: mark published executions queued (with the epoch) only while the shard's epoch is ours.
WITH fence AS (
    SELECT shard, epoch FROM shard_epochs WHERE shard = $1 AND epoch = $2 FOR SHARE
)
UPDATE executions e SET status = 'queued', enqueued_at = $5, dispatch_epoch = fence.epoch
FROM fence
WHERE e.shard = fence.shard AND e.status = 'scheduled'
  AND (e.id, e.due_at) IN (SELECT * FROM unnest($3::uuid[], $4::timestamptz[]))

-- name: skip_executions
-- Fenced: record occurrences that will not run (deadline missed, Forbid overlap) with why.
WITH fence AS (
    SELECT shard FROM shard_epochs WHERE shard = $1 AND epoch = $2 FOR SHARE
)
UPDATE executions e SET status = 'skipped', finished_at = $5, error_kind = $6, error_message = $7
FROM fence
WHERE e.shard = fence.shard AND e.status = 'scheduled'
  AND (e.id, e.due_at) IN (SELECT * FROM unnest($3::uuid[], $4::timestamptz[]))

-- name: live_executions_of_jobs
-- Queued or running executions of these jobs (concurrency policies).
SELECT id, job_id, due_at, status FROM executions
WHERE job_id = ANY($1::uuid[]) AND status IN ('queued', 'running')

-- name: request_cancel
-- Ask the worker running these executions to cancel them (Replace policy, job cancelled).
UPDATE executions SET cancel_requested = true
WHERE (id, due_at) IN (SELECT * FROM unnest($1::uuid[], $2::timestamptz[]))
  AND status IN ('queued', 'running')

-- name: stale_queued
-- Queued executions of these shards published before $2 and never claimed (reaper).
SELECT e.id, e.job_id, e.tenant, e.task, e.shard, e.due_at, e.occurrence_at, e.attempt
FROM executions e
WHERE e.shard = ANY($1::smallint[]) AND e.status = 'queued' AND e.enqueued_at < $2
ORDER BY e.enqueued_at
LIMIT $3

-- name: touch_queued
-- Fenced: note that queued executions were published again.
WITH fence AS (
    SELECT shard FROM shard_epochs WHERE shard = $1 AND epoch = $2 FOR SHARE
)
UPDATE executions e SET enqueued_at = $5
FROM fence
WHERE e.shard = fence.shard AND e.status = 'queued'
  AND (e.id, e.due_at) IN (SELECT * FROM unnest($3::uuid[], $4::timestamptz[]))

-- name: expired_running
-- Running executions of these shards whose lease ran out before $2 (reaper), with their policy.
SELECT e.id, e.job_id, e.tenant, e.task, e.shard, e.due_at, e.occurrence_at, e.attempt,
       e.job_version, e.lease_owner, j.retry_policy
FROM executions e JOIN jobs j ON j.id = e.job_id
WHERE e.shard = ANY($1::smallint[]) AND e.status = 'running' AND e.lease_until < $2
ORDER BY e.lease_until
LIMIT $3

-- name: lose_lease
-- Fenced: a running execution whose lease is still expired becomes a failed (or dead) attempt.
WITH fence AS (
    SELECT shard FROM shard_epochs WHERE shard = $3 AND epoch = $4 FOR SHARE
)
UPDATE executions e SET status = $6, finished_at = $5, error_kind = 'lease_lost',
       error_message = 'worker ' || coalesce(e.lease_owner, '?') || ' stopped heartbeating',
       lease_until = NULL
FROM fence
WHERE e.id = $1 AND e.due_at = $2 AND e.shard = fence.shard AND e.status = 'running'
  AND e.lease_until < $5
RETURNING e.job_id

-- name: claim_execution
-- Claim a dispatched execution for one worker: running, leased, job fresh. No row: stale or duplicate.
UPDATE executions e SET status = 'running', lease_owner = $3, lease_until = $4::timestamptz + $5::interval,
       started_at = $4
FROM jobs j
WHERE e.id = $1 AND e.due_at = $2 AND e.status IN ('queued', 'scheduled')
  AND j.id = e.job_id AND j.state = 'active' AND j.spec_version = e.job_version
RETURNING e.id, e.job_id, e.tenant, e.task, e.shard, e.due_at, e.occurrence_at, e.attempt,
          e.job_version, j.payload, j.timeout_seconds, j.retry_policy, j.run_at, j.source, j.name

-- name: tenant_limit
-- A tenant's limit of concurrently running executions (no row or NULL: unlimited).
SELECT max_running FROM tenants WHERE name = $1

-- name: lock_tenant
-- Serialise claims of one limited tenant for the rest of the transaction.
SELECT pg_advisory_xact_lock(hashtext('horae_tenant:' || $1))

-- name: tenant_running
-- How many executions of a tenant run right now.
SELECT count(*) FROM executions WHERE tenant = $1 AND status = 'running'

-- name: throttle_execution
-- No tenant slot: back to `scheduled`, due again a little later (not an attempt).
UPDATE executions SET status = 'scheduled', due_at = $3, enqueued_at = NULL,
       dispatch_epoch = NULL
WHERE id = $1 AND due_at = $2 AND status IN ('queued', 'scheduled')
RETURNING shard

-- name: cancel_stale
-- A dispatched execution whose job was paused, cancelled or edited: cancelled, never run.
UPDATE executions e SET status = 'cancelled', finished_at = $3, error_kind = 'stale',
       error_message = 'job ' || j.state::text || ' or edited (version ' || j.spec_version::text
                       || ') before this execution started'
FROM jobs j
WHERE e.id = $1 AND e.due_at = $2 AND e.status IN ('queued', 'scheduled')
  AND j.id = e.job_id AND NOT (j.state = 'active' AND j.spec_version = e.job_version)
RETURNING e.job_id

-- name: finish_execution
-- Record a running execution's terminal outcome (only by its lease owner).
UPDATE executions SET status = $4, finished_at = $5, error_kind = $6, error_message = $7,
       result = $8, lease_until = NULL
WHERE id = $1 AND due_at = $2 AND status = 'running' AND lease_owner = $3
RETURNING job_id

-- name: record_job_run
-- Remember a job's latest outcome (a one-off that ended is completed); tell operators when
-- the job is a ScheduledJob. Only those notify: NOTIFY serialises committing transactions.
WITH updated AS (
    UPDATE jobs SET last_run_at = $2, last_status = $3, updated_at = $2,
           state = CASE WHEN run_at IS NOT NULL AND state = 'active' AND $4
                        THEN 'completed'::job_state ELSE state END,
           next_run_at = CASE WHEN run_at IS NOT NULL AND $4 THEN NULL ELSE next_run_at END
    WHERE id = $1
    RETURNING id, source
)
SELECT pg_notify('horae_job_events', id::text) FROM updated WHERE source = 'crd'

-- name: job_executions
-- A job's executions, newest first, optionally of one status, before a cursor (due_at, id).
SELECT * FROM executions
WHERE job_id = $1 AND ($2::execution_status IS NULL OR status = $2)
  AND ($3::timestamptz IS NULL OR (due_at, id) < ($3, $4::uuid))
ORDER BY due_at DESC, id DESC
LIMIT $5

-- name: get_execution
-- One execution by id within a tenant (NULL tenant: any tenant).
SELECT * FROM executions WHERE id = $1 AND ($2::text IS NULL OR tenant = $2)

-- name: release_running
-- Shutdown: give this worker's unfinished executions back, due now (not an attempt).
UPDATE executions SET status = 'scheduled', due_at = $3, lease_owner = NULL,
       lease_until = NULL, started_at = NULL, enqueued_at = NULL, dispatch_epoch = NULL
WHERE lease_owner = $1 AND status = 'running' AND id = ANY($2::uuid[])
RETURNING id, shard

-- name: heartbeat
-- Extend the leases of every execution this worker runs; report those marked for cancellation.
UPDATE executions SET lease_until = $2::timestamptz + $3::interval
WHERE lease_owner = $1 AND status = 'running'
RETURNING id, cancel_requested

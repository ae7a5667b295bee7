-- name: insert_jobs
-- One statement: insert jobs, their first executions, and tell the shards of executions due
-- before $29 (NOTIFY is delivered at COMMIT); unless one of the jobs' shards moved out of
-- this store group (`moved`, share-locked first: then nothing is inserted). Once inserted,
-- the tenants' quota locks (as `lock_tenant_quotas`), so that concurrent creates of a
-- tenant insert side by side and only their quota checks and commits take turns.
-- With $43 (a create in this one statement, no transaction around it), the quota check
-- too, by the tenants' use bounds (as `bump_tenant_use`): the quotas in force are the
-- tenant's own or, when given, those of the other store groups' reading ($37-$42: tenant,
-- its use there, whether main's settings were read, and those), $35 and $36 the defaults;
-- a bound not kept yet or that would fail a quota fails the statement
-- (horae_quota_recount): nothing is written, and the caller counts in a transaction.
WITH moved AS (
    SELECT horae_shards_moved_out(ARRAY(SELECT DISTINCT unnest($17::smallint[]))) AS shards
), new_jobs AS (
    INSERT INTO jobs (id, tenant, name, source, task, payload, run_at, cron, time_zone,
                      jitter_seconds, retry_policy, timeout_seconds, concurrency_policy,
                      starting_deadline_seconds, catch_up, state, shard, next_run_at,
                      idempotency_key, request_hash, fires_per_minute, catch_up_window_seconds,
                      pause_after_failures, created_at, updated_at, paused_at)
    SELECT u.*, $21::timestamptz, $21::timestamptz,
           CASE WHEN u.state = 'paused' THEN $21::timestamptz END
    FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[],
                $7::timestamptz[], $8::text[], $9::text[], $10::int[], $11::jsonb[], $12::int[],
                $13::text[], $14::int[], $15::text[], $16::job_state[], $17::smallint[],
                $18::timestamptz[], $19::text[], $20::text[], $32::float8[], $33::int[],
                $34::int[])
         AS u(id, tenant, name, source, task, payload, run_at, cron, time_zone, jitter_seconds,
              retry_policy, timeout_seconds, concurrency_policy, starting_deadline_seconds,
              catch_up, state, shard, next_run_at, idempotency_key, request_hash,
              fires_per_minute, catch_up_window_seconds, pause_after_failures)
    WHERE cardinality((SELECT shards FROM moved)) = 0
    RETURNING id, tenant, fires_per_minute
), new_executions AS (
    INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at,
                            starting_deadline_seconds, concurrency_policy, attempt,
                            job_version, status, created_at)
    SELECT e.*, 1, 1, 'scheduled', $21::timestamptz
    FROM unnest($22::uuid[], $23::uuid[], $24::text[], $25::text[], $26::smallint[],
                $27::timestamptz[], $28::timestamptz[], $30::int[], $31::text[])
         AS e(id, job_id, tenant, task, shard, due_at, occurrence_at,
              starting_deadline_seconds, concurrency_policy)
    WHERE cardinality((SELECT shards FROM moved)) = 0
    RETURNING id, shard, due_at
), notified AS (
    -- what the scheduler reads of the new rows (migration 021)
    SELECT horae_notify_new(array_agg(id), array_agg(shard), array_agg(due_at)) AS told
    FROM new_executions WHERE due_at < $29
), adding AS (
    -- after both inserts (read whole first)
    SELECT tenant, count(*) AS jobs, sum(fires_per_minute) AS rate FROM new_jobs
    WHERE (SELECT count(*) FROM new_executions) >= 0 GROUP BY tenant
), quota_locks AS (
    -- in the tenants' order
    SELECT pg_advisory_xact_lock(hashtext('horae_quota:' || t.tenant))
    FROM (SELECT tenant FROM adding ORDER BY tenant) t
), bumped AS (
    UPDATE tenant_use b SET jobs = b.jobs + a.jobs, fires_per_minute = b.fires_per_minute + a.rate
    FROM adding a
    WHERE $43::boolean AND b.tenant = a.tenant AND (SELECT count(*) FROM quota_locks) >= 0
    RETURNING b.tenant, b.jobs, b.fires_per_minute
), refused AS (
    SELECT horae_quota_recount(a.tenant)
    FROM adding a
    LEFT JOIN bumped b ON b.tenant = a.tenant
    LEFT JOIN tenants t ON t.name = a.tenant
    LEFT JOIN unnest($37::text[], $38::bigint[], $39::float8[], $40::boolean[], $41::int[],
                     $42::int[]) AS e(tenant, jobs, rate, read, max_jobs, max_rate)
           ON e.tenant = a.tenant
    WHERE $43::boolean AND (
        b.tenant IS NULL
        OR b.jobs + coalesce(e.jobs, 0)
           > coalesce(CASE WHEN e.read THEN e.max_jobs ELSE t.max_jobs END, $35::int)
        OR (a.rate > 0 AND b.fires_per_minute + coalesce(e.rate, 0)
            > coalesce(CASE WHEN e.read THEN e.max_rate ELSE t.max_fires_per_minute END,
                       $36::int) + 1e-6))
)
SELECT (SELECT shards FROM moved) AS moved,
       (SELECT count(*) FROM new_jobs) AS jobs,
       (SELECT count(*) FROM new_executions) AS executions,
       (SELECT told FROM notified) AS notified,
       (SELECT count(*) FROM quota_locks) AS locked,
       (SELECT count(*) FROM refused) AS refused

-- name: get_job
-- One job by id within a tenant (NULL tenant: any tenant).
SELECT * FROM jobs WHERE id = $1 AND ($2::text IS NULL OR tenant = $2)

-- name: recurring_jobs
-- Which of these jobs are active cron jobs (their rows, to schedule their next occurrence).
SELECT * FROM jobs WHERE id = ANY($1::uuid[]) AND cron IS NOT NULL AND state = 'active'

-- name: cancel_running
-- Ask workers to stop this job's queued or running executions (the job was cancelled).
UPDATE executions SET cancel_requested = true
WHERE job_id = $1 AND status IN ('queued', 'running')

-- name: lock_job_executions
-- A job's unfinished executions, locked in id order before the job itself: every writer of
-- executions (a worker's outcome, a dispatch round, the reaper) locks them first and their
-- jobs after, so a change of the job (pause, cancel, edit) that locked the job first and then
-- its executions deadlocked with them.
-- (Scheduled ones through executions_job_status, queued and running ones through
-- executions_job_live: the two arms name each index's predicate.)
SELECT 1 FROM executions
WHERE job_id = $1
  AND ((status = 'scheduled' AND status NOT IN ('queued', 'running'))
       OR status IN ('queued', 'running'))
  AND ($2::text IS NULL OR tenant = $2)
ORDER BY id
FOR UPDATE

-- name: get_job_for_update
-- One job by id, locked for the rest of the transaction.
SELECT * FROM jobs WHERE id = $1 FOR UPDATE

-- name: update_job_spec
-- Replace a job's spec (and its fire rate) and bump its version (an edit).
UPDATE jobs SET task = $2, payload = $3, run_at = $4, cron = $5, time_zone = $6,
       jitter_seconds = $7, retry_policy = $8, timeout_seconds = $9,
       concurrency_policy = $10, starting_deadline_seconds = $11,
       spec_version = spec_version + 1, next_run_at = $12, updated_at = $13, catch_up = $14,
       fires_per_minute = $15, catch_up_window_seconds = $16, pause_after_failures = $17,
       state = CASE WHEN state = 'completed' THEN 'active'::job_state ELSE state END
WHERE id = $1
RETURNING spec_version, state

-- name: set_manual_trigger
-- Record the last `horae.dev/trigger` value a ScheduledJob's job handled.
UPDATE jobs SET manual_trigger = $2 WHERE id = $1

-- name: set_job_state
-- Move a job to a new state and record its next run (and when it was paused; a job no longer
-- paused forgets why it was, and one made active starts counting its failures afresh).
UPDATE jobs SET state = $2::job_state, next_run_at = $3, updated_at = $4::timestamptz,
       paused_at = CASE WHEN $2::job_state = 'paused' THEN $4::timestamptz END,
       paused_reason = CASE WHEN $2::job_state = 'paused' THEN paused_reason END,
       paused_for_failures = $2::job_state = 'paused' AND paused_for_failures,
       consecutive_failures = CASE WHEN $2::job_state = 'active' THEN 0
                                   ELSE consecutive_failures END
WHERE id = $1

-- name: set_paused_reason
-- A paused job's reason, as a user gave it (NULL: none); it is paused by hand from now on.
UPDATE jobs SET paused_reason = $2, paused_for_failures = false WHERE id = $1

-- name: set_next_runs
-- Record jobs' next nominal fire times, locking the jobs in id order (see record_job_runs);
-- never an earlier one than recorded (a BufferOne occurrence dispatched after waiting, whose
-- next one was scheduled, and perhaps skipped, while it waited).
WITH target AS (
    SELECT j.id, u.next_run_at
    FROM jobs j JOIN unnest($1::uuid[], $2::timestamptz[]) AS u(id, next_run_at) ON j.id = u.id
    ORDER BY j.id
    FOR UPDATE OF j
)
UPDATE jobs j SET next_run_at = t.next_run_at, updated_at = $3
FROM target t
WHERE j.id = t.id AND (j.next_run_at IS NULL OR j.next_run_at < t.next_run_at)

-- name: list_jobs
-- A tenant's jobs in creation order, after a cursor (created_at, id), optionally of one state.
SELECT * FROM jobs
WHERE tenant = $1 AND ($2::job_state IS NULL OR state = $2)
  AND ($3::timestamptz IS NULL OR (created_at, id) > ($3, $4::uuid))
ORDER BY created_at, id
LIMIT $5

-- name: job_by_idempotency_key
-- The job a tenant created with an Idempotency-Key, and the hash of that request.
SELECT id, request_hash FROM jobs WHERE tenant = $1 AND idempotency_key = $2

-- name: upsert_tenant
-- Create a tenant or replace its settings: the limit of concurrently running executions and
-- its quotas (NULL: no limit; the default quota).
INSERT INTO tenants (name, max_running, max_jobs, max_fires_per_minute) VALUES ($1, $2, $3, $4)
ON CONFLICT (name) DO UPDATE SET max_running = $2, max_jobs = $3, max_fires_per_minute = $4

-- name: list_tenants
-- Tenants (all, or the one named $1) with their settings and what they use: executions
-- running right now, live jobs and those jobs' fires per minute.
SELECT t.name, t.max_running, t.max_jobs, t.max_fires_per_minute,
       (SELECT count(*) FROM executions e WHERE e.tenant = t.name
        AND e.status = 'running')::int AS running,
       used.jobs, used.fires_per_minute
FROM tenants t
CROSS JOIN LATERAL (
    SELECT count(*)::int AS jobs, coalesce(sum(j.fires_per_minute), 0)::float8 AS fires_per_minute
    FROM jobs j WHERE j.tenant = t.name AND j.state IN ('active', 'paused')
) used
WHERE $1::text IS NULL OR t.name = $1
ORDER BY t.name

-- name: notify_job
-- Tell operators that a job's executions changed (status mirrors).
SELECT pg_notify('horae_job_events', $1::text)

-- name: live_crd_job
-- The live (not cancelled) job of a ScheduledJob by namespace and name.
SELECT id FROM jobs WHERE tenant = $1 AND name = $2 AND source = 'crd' AND state <> 'cancelled'

-- name: live_crd_jobs
-- Every ScheduledJob's job that is not cancelled (the operator's resync compares them
-- with the resources).
SELECT id, tenant, name, state, created_at FROM jobs WHERE source = 'crd' AND state <> 'cancelled'

-- name: existing_job_ids
-- Which of these job ids exist, in any state.
SELECT id FROM jobs WHERE id = ANY($1::uuid[])

-- name: latest_attempt
-- The latest attempt of one occurrence of a job (due no earlier than a day before it).
-- (first attempts through executions_occurrence, the others through
-- executions_occurrence_rest, as explain's occurrence_rows reads them).
SELECT id, attempt, status FROM (
    (SELECT id, attempt, status, due_at FROM executions
     WHERE job_id = $1 AND occurrence_at = $2 AND due_at >= $2 - interval '1 day'
       AND attempt = 1 AND status <> 'cancelled')
    UNION ALL
    (SELECT id, attempt, status, due_at FROM executions
     WHERE job_id = $1 AND occurrence_at = $2 AND due_at >= $2 - interval '1 day'
       AND (attempt > 1 OR status = 'cancelled'))
) a
ORDER BY attempt DESC, due_at DESC LIMIT 1

-- name: lock_tenant_quotas
-- Serialise quota checks of these tenants (in the given order: sorted) for the transaction.
SELECT pg_advisory_xact_lock(hashtext('horae_quota:' || t)) FROM unnest($1::text[]) AS t

-- name: bump_tenant_use
-- These tenants' quotas (NULL: the default) and their use bounds (`tenant_use`) raised by
-- what a write adds ($2 jobs, $3 fires per minute each): the bounds after the write (NULL:
-- none kept yet). Under the tenants' quota locks.
WITH bumped AS (
    UPDATE tenant_use b SET jobs = b.jobs + a.jobs, fires_per_minute = b.fires_per_minute + a.rate
    FROM unnest($1::text[], $2::bigint[], $3::float8[]) AS a(tenant, jobs, rate)
    WHERE b.tenant = a.tenant
    RETURNING b.tenant, b.jobs, b.fires_per_minute
)
SELECT u.name, t.max_jobs, t.max_fires_per_minute, b.jobs, b.fires_per_minute
FROM unnest($1::text[]) AS u(name)
LEFT JOIN tenants t ON t.name = u.name
LEFT JOIN bumped b ON b.tenant = u.name

-- name: set_tenant_use
-- Set these tenants' use bounds to what was just counted (under their quota locks).
INSERT INTO tenant_use (tenant, jobs, fires_per_minute)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::float8[])
ON CONFLICT (tenant) DO UPDATE SET jobs = EXCLUDED.jobs, fires_per_minute = EXCLUDED.fires_per_minute

-- name: tenant_quota_bounds
-- These tenants' quotas (NULL: the default) and a bound on what their live jobs use here:
-- the bound kept (`tenant_use`), or where none is, the count.
SELECT u.name, t.max_jobs, t.max_fires_per_minute,
       coalesce(b.jobs::int, c.jobs) AS jobs,
       coalesce(b.fires_per_minute, c.fires_per_minute) AS fires_per_minute
FROM unnest($1::text[]) AS u(name)
LEFT JOIN tenants t ON t.name = u.name
LEFT JOIN tenant_use b ON b.tenant = u.name
CROSS JOIN LATERAL (
    SELECT count(*)::int AS jobs, coalesce(sum(j.fires_per_minute), 0)::float8 AS fires_per_minute
    FROM jobs j WHERE b.tenant IS NULL AND j.tenant = u.name AND j.state IN ('active', 'paused')
) c

-- name: tenant_quotas
-- These tenants' quotas (NULL: the default) and what their live jobs use of them: counted.
SELECT u.name, t.max_jobs, t.max_fires_per_minute, used.jobs, used.fires_per_minute
FROM unnest($1::text[]) AS u(name)
LEFT JOIN tenants t ON t.name = u.name
CROSS JOIN LATERAL (
    SELECT count(*)::int AS jobs, coalesce(sum(j.fires_per_minute), 0)::float8 AS fires_per_minute
    FROM jobs j WHERE j.tenant = u.name AND j.state IN ('active', 'paused')
) used

-- name: tenants_usage
-- What tenants $1 use in this store group (the others' share of `list_tenants`): executions
-- running right now, live jobs and those jobs' fires per minute.
SELECT u.name,
       (SELECT count(*) FROM executions e WHERE e.tenant = u.name
        AND e.status = 'running')::int AS running,
       used.jobs, used.fires_per_minute
FROM unnest($1::text[]) AS u(name)
CROSS JOIN LATERAL (
    SELECT count(*)::int AS jobs, coalesce(sum(j.fires_per_minute), 0)::float8 AS fires_per_minute
    FROM jobs j WHERE j.tenant = u.name AND j.state IN ('active', 'paused')
) used

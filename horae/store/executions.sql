-- name: insert_executions
-- Schedule executions (deadline and policy copied from their jobs); a nominal occurrence
-- already scheduled is left alone, even one whose due_at has moved since (throttled by a
-- tenant limit, handed back by a stopping worker: the unique index includes due_at, the
-- partition key, so only NOT EXISTS sees it; the day's margin, against workers' clocks,
-- keeps the look-up to a few partitions).
-- Shards of rows due before $11 are told (at COMMIT). $12: which are manual (triggered).
WITH inserted AS (
    INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,
                            job_version, status, created_at, starting_deadline_seconds,
                            concurrency_policy, manual)
    SELECT u.id, u.job_id, u.tenant, u.task, u.shard, u.due_at, u.occurrence_at, u.attempt,
           u.job_version, 'scheduled', $10, j.starting_deadline_seconds, j.concurrency_policy,
           u.manual
    FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::smallint[],
                $6::timestamptz[], $7::timestamptz[], $8::int[], $9::int[], $12::bool[])
         AS u(id, job_id, tenant, task, shard, due_at, occurrence_at, attempt, job_version,
              manual)
    JOIN jobs j ON j.id = u.job_id
    WHERE u.attempt <> 1 OR NOT EXISTS (
        SELECT 1 FROM executions x
        WHERE x.job_id = u.job_id AND x.occurrence_at = u.occurrence_at
          AND x.due_at >= u.occurrence_at - interval '1 day'
          AND x.attempt = 1 AND x.status <> 'cancelled')
    ON CONFLICT (job_id, occurrence_at, due_at, shard) WHERE attempt = 1 AND status <> 'cancelled'
    DO NOTHING
    RETURNING id, shard, due_at
), notified AS (
    -- what the scheduler reads of the new rows (migration 021)
    SELECT horae_notify_new(array_agg(id), array_agg(shard), array_agg(due_at)) AS told
    FROM inserted WHERE due_at < $11
)
SELECT i.id, (SELECT told FROM notified) AS notified FROM inserted i

-- name: insert_skipped
-- Record nominal occurrences that did not run (a pause, a catch-up), with why, except those
-- that already have a row.
INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,
                        job_version, status, created_at, finished_at, error_kind, error_message)
SELECT u.id, u.job_id, u.tenant, u.task, u.shard, u.occurrence_at, u.occurrence_at, 1,
       u.job_version, 'skipped', $8, $8, u.kind, u.message
FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::smallint[], $6::timestamptz[],
            $7::int[], $9::text[], $10::text[])
     AS u(id, job_id, tenant, task, shard, occurrence_at, job_version, kind, message)
WHERE NOT EXISTS (SELECT 1 FROM executions x WHERE x.job_id = u.job_id
                  AND x.occurrence_at = u.occurrence_at AND x.attempt = 1
                  AND x.status <> 'cancelled')

-- name: cancel_pending
-- Cancel a job's executions that have not been dispatched yet, recording why.
UPDATE executions SET status = 'cancelled', finished_at = $2, error_kind = $3,
       error_message = $4
WHERE job_id = $1 AND status = 'scheduled'

-- name: preload_due
-- Pending executions of the given shards due before $2, after the cursor ($3, $4), in due order (hot path);
-- with $6, only those whose ids are not below it (made since: a NOTIFY's re-read).
SELECT id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,
       starting_deadline_seconds, concurrency_policy, manual, backfill
FROM executions
WHERE shard = ANY($1::smallint[]) AND status = 'scheduled' AND due_at < $2
  AND due_at >= $3::timestamptz  -- redundant with the next line, but lets partitions be pruned
  AND (due_at, id) > ($3::timestamptz, $4::uuid)
  AND ($6::uuid IS NULL OR id >= $6::uuid)
ORDER BY due_at, id
LIMIT $5

-- name: take_shards
-- Bump shards' fencing epochs as a new owner takes them, locking them in shard order (as
-- lock_epochs does); returns each one's new epoch (none for a shard that moved out of this
-- store group).
INSERT INTO shard_epochs AS s (shard, epoch, owner, taken_at)
SELECT u.shard, 1, $2, $3 FROM unnest($1::smallint[]) AS u(shard) ORDER BY u.shard
ON CONFLICT (shard) DO UPDATE SET epoch = s.epoch + 1, owner = $2, taken_at = $3
WHERE NOT s.moved_out
RETURNING shard, epoch

-- name: take_lock_timeout
-- For the rest of a take's transaction: wait at most $1 ms for a lock.
SELECT set_config('lock_timeout', $1, true)

-- name: lock_epochs
-- Fence: hold our epochs of these shards for the rest of the transaction; returns the shards
-- still ours (a shard missing from the answer moved on to another replica).
SELECT s.shard FROM shard_epochs s
JOIN unnest($1::smallint[], $2::bigint[]) AS f(shard, epoch)
  ON s.shard = f.shard AND s.epoch = f.epoch
ORDER BY s.shard
FOR SHARE OF s

-- name: skip_executions
-- Record occurrences that will not run (deadline missed, Forbid overlap, catch-up) with why
-- (fenced by the caller: lock_epochs); returns the ids of the rows skipped.
UPDATE executions e SET status = 'skipped', finished_at = $5, error_kind = u.kind,
       error_message = u.message
FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::text[]) AS u(id, due_at, kind, message)
WHERE e.id = u.id AND e.due_at = u.due_at AND e.status = 'scheduled'
RETURNING e.id

-- name: live_executions_of_jobs
-- What of these jobs an overlap policy looks at: their queued (earlier releases) and running
-- executions, with the worker holding each; and their executions still scheduled and due by
-- $2 (published and not claimed yet, or waiting behind a running one, or due this round:
-- the caller, which knows what it published, tells them apart), through
-- executions_job_status (its predicate in the text, so that every plan may use it).
SELECT id, job_id, due_at, occurrence_at, status::text, lease_owner, attempt FROM executions
WHERE job_id = ANY($1::uuid[]) AND status IN ('queued', 'running')
UNION ALL
SELECT id, job_id, due_at, occurrence_at, status::text, lease_owner, attempt FROM executions
WHERE job_id = ANY($1::uuid[]) AND status = 'scheduled' AND status NOT IN ('queued', 'running')
  AND due_at <= $2

-- name: request_cancel
-- Fenced (lock_epochs): end the executions a Replace occurrence replaces, locked in id order
-- as every batched writer locks them. One not started (scheduled, queued) is cancelled at
-- once and never runs (its claim finds it ended); a running one is marked, and answered with
-- the worker holding it, to be told now (its next heartbeat also finds the mark).
WITH target AS (
    SELECT e.id, e.due_at
    FROM executions e
    JOIN unnest($1::uuid[], $2::timestamptz[]) AS u(id, due_at)
      ON e.id = u.id AND e.due_at = u.due_at
    WHERE e.status IN ('scheduled', 'queued', 'running')
    ORDER BY e.id
    FOR UPDATE OF e
)
UPDATE executions e SET cancel_requested = true,
       status = CASE WHEN e.status = 'running' THEN e.status
                     ELSE 'cancelled'::execution_status END,
       finished_at = CASE WHEN e.status = 'running' THEN NULL ELSE $3::timestamptz END,
       error_kind = CASE WHEN e.status = 'running' THEN e.error_kind
                         ELSE 'cancel_requested' END,
       error_message = CASE WHEN e.status = 'running' THEN e.error_message ELSE $4::text END
FROM target t
WHERE e.id = t.id AND e.due_at = t.due_at
RETURNING e.id, e.status::text, e.lease_owner

-- name: stale_queued
-- Executions of these shards marked queued (by an earlier release) and published and due
-- before $2, never claimed (reaper). One published early (the dispatch lead) waits at a
-- worker until it is due.
SELECT e.id, e.job_id, e.tenant, e.task, e.shard, e.due_at, e.occurrence_at, e.attempt
FROM executions e
WHERE e.shard = ANY($1::smallint[]) AND e.status = 'queued' AND e.enqueued_at < $2
  AND e.due_at < $2
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

-- name: still_scheduled
-- Which of these executions (id, due_at, shard: published by this replica) no worker has
-- claimed yet (reaper): one look-up of its key each (LIMIT keeps the subquery a nested
-- loop's inner side, never a scan of every scheduled row to join with), one partition.
SELECT e.id, e.job_id, e.tenant, e.task, e.shard, e.due_at, e.occurrence_at, e.attempt
FROM unnest($1::uuid[], $2::timestamptz[], $3::smallint[]) AS u(id, due_at, shard)
CROSS JOIN LATERAL (
    SELECT x.id, x.job_id, x.tenant, x.task, x.shard, x.due_at, x.occurrence_at, x.attempt
    FROM executions x
    WHERE x.id = u.id AND x.due_at = u.due_at AND x.shard = u.shard AND x.status = 'scheduled'
    LIMIT 1
) AS e

-- name: expired_running
-- Running executions of these shards whose lease ran out before $2 (reaper), with their policy:
-- those that started (a claim ahead of the due time has no start time until its outcome is
-- recorded: `return_unstarted`), and those asked to stop.
SELECT e.id, e.job_id, e.tenant, e.task, e.shard, e.due_at, e.occurrence_at, e.attempt,
       e.job_version, e.lease_owner, j.retry_policy, j.name AS job_name, e.manual
FROM executions e JOIN jobs j ON j.id = e.job_id
WHERE e.shard = ANY($1::smallint[]) AND e.status = 'running' AND e.lease_until < $2
  AND (e.started_at IS NOT NULL OR e.cancel_requested)
ORDER BY e.lease_until
LIMIT $3

-- name: return_unpromised
-- Fenced ($1 shards, $2 their epochs): executions claimed ahead whose workers' promises ran
-- out more than their grace before their due times (within $3), back to `scheduled`; how
-- many per shard (horae_return_unpromised).
SELECT shard, returned FROM horae_return_unpromised($1::smallint[], $2::bigint[], $3::interval)

-- name: return_unstarted
-- Fenced ($1 shards, $2 their epochs): executions claimed ahead of their due time whose lease
-- ran out before $3 with no outcome recorded (their worker died before they were due, or
-- before it recorded them): the store cannot tell whether a handler began, so each goes back
-- to `scheduled` as it was due, not an attempt; its shard is told. How many per shard.
WITH fence AS (
    SELECT s.shard FROM shard_epochs s
    JOIN unnest($1::smallint[], $2::bigint[]) AS u(shard, epoch)
      ON s.shard = u.shard AND s.epoch = u.epoch
    ORDER BY s.shard
    FOR SHARE OF s
), target AS (
    SELECT e.id, e.due_at FROM executions e JOIN fence f ON e.shard = f.shard
    WHERE e.status = 'running' AND e.lease_until < $3 AND e.started_at IS NULL
      AND NOT e.cancel_requested
    ORDER BY e.id
    FOR UPDATE OF e SKIP LOCKED
), returned AS (
    UPDATE executions e SET status = 'scheduled', lease_owner = NULL, lease_until = NULL
    FROM target t
    WHERE e.id = t.id AND e.due_at = t.due_at
    RETURNING e.shard
)
SELECT r.shard, count(*)::int AS returned, pg_notify('horae_shard_' || r.shard::text, 'returned')
FROM returned r GROUP BY r.shard

-- name: lose_lease
-- Fenced: a running execution whose lease is still expired becomes a failed (or dead)
-- attempt, or cancelled when it was asked to stop (job cancelled, Replace): what it ended as.
WITH fence AS (
    SELECT shard FROM shard_epochs WHERE shard = $3 AND epoch = $4 FOR SHARE
)
UPDATE executions e SET status = CASE WHEN e.cancel_requested THEN 'cancelled'::execution_status
                                     ELSE $6::execution_status END,
       finished_at = $5,
       error_kind = CASE WHEN e.cancel_requested THEN 'cancel_requested' ELSE 'lease_lost' END,
       error_message = CASE WHEN e.cancel_requested
                            THEN 'cancelled (the job was cancelled or replaced) while its worker '
                                 || coalesce(e.lease_owner, '?')
                                 || ' was gone: it stopped heartbeating'
                            ELSE 'worker ' || coalesce(e.lease_owner, '?') || ' stopped heartbeating'
                       END,
       lease_until = NULL
FROM fence
WHERE e.id = $1 AND e.due_at = $2 AND e.shard = fence.shard AND e.status = 'running'
  AND e.lease_until < $5
RETURNING e.job_id, e.status::text, e.error_message

-- name: claim
-- A worker's claim of one batch (horae_claim, migration 004: only the tenants it serves and
-- that its messages named, within the rows' tenants' limits).
SELECT * FROM horae_claim($1::uuid[], $2::timestamptz[], $3::text[], $4::text[], $5, $6, $7, $8)

-- name: schedule_claimed_next
-- Schedule the next occurrences of claimed executions found still `scheduled` (horae_schedule_next).
SELECT horae_schedule_next($1, $2::uuid[], $3::timestamptz[], $4::uuid[], $5::timestamptz[],
                           $6::timestamptz[], $7, $8)

-- name: finish
-- Record a worker's outcomes (with when each handler began), retries and jobs' latest runs in
-- one statement (horae_finish).
SELECT id FROM horae_finish($1::uuid[], $2::timestamptz[], $3::execution_status[], $4::text[],
                            $5::text[], $6::jsonb[], $7::timestamptz[], $8::uuid[], $9, $10, $11,
                            $12::timestamptz[])
    AS f(id)

-- name: tenant_limits
-- The limits in this store group (the allowance when set) of those of these tenants that have
-- one (a tenant not answered is unlimited).
SELECT name, coalesce(allowance, max_running) AS max_running FROM tenants
WHERE name = ANY($1::text[]) AND max_running IS NOT NULL
ORDER BY name

-- name: tenants_running
-- How many executions of each of these tenants run right now (a tenant not answered: none).
SELECT tenant, count(*) AS running FROM executions
WHERE tenant = ANY($1::text[]) AND status = 'running'
GROUP BY tenant

-- name: record_job_runs
-- Remember jobs' latest outcomes, count their consecutive failures and pause those that
-- reach their failure policy (horae_record_runs, migration 011). (The reaper's; a worker's
-- is part of horae_finish.)
SELECT horae_record_runs($1::uuid[], $2::execution_status[], $3::bool[], $4::uuid[], $5::text[],
                         $6::timestamptz)

-- name: job_executions
-- A job's executions, newest first, before a cursor (due_at, id): the newest of each status
-- (one probe of executions_job_status per status but queued and running, whose predicate
-- is in the text so that every plan may use it; queued and running ones through
-- executions_job_live), merged. No read of the job's whole history.
SELECT * FROM (
    SELECT e.* FROM unnest(enum_range(NULL::execution_status)) AS s(status)
    CROSS JOIN LATERAL (
        SELECT * FROM executions x
        WHERE x.job_id = $1 AND x.status = s.status AND x.status NOT IN ('queued', 'running')
          AND ($2::timestamptz IS NULL OR (x.due_at, x.id) < ($2, $3::uuid))
        ORDER BY x.due_at DESC, x.id DESC
        LIMIT $4) e
    WHERE s.status NOT IN ('queued', 'running')
    UNION ALL
    SELECT * FROM executions
    WHERE job_id = $1 AND status IN ('queued', 'running')
      AND ($2::timestamptz IS NULL OR (due_at, id) < ($2, $3::uuid))
) a
ORDER BY due_at DESC, id DESC
LIMIT $4

-- name: job_executions_of_status
-- A job's executions of one status but queued or running, newest first, before a cursor
-- (the status excluded in the text too, so every plan may use executions_job_status).
SELECT * FROM executions
WHERE job_id = $1 AND status = $2 AND status NOT IN ('queued', 'running')
  AND ($3::timestamptz IS NULL OR (due_at, id) < ($3, $4::uuid))
ORDER BY due_at DESC, id DESC
LIMIT $5

-- name: job_executions_live
-- A job's queued or running executions of one status, newest first, before a cursor
-- (through executions_job_live: a job has few).
SELECT * FROM executions
WHERE job_id = $1 AND status = $2 AND status IN ('queued', 'running')
  AND ($3::timestamptz IS NULL OR (due_at, id) < ($3, $4::uuid))
ORDER BY due_at DESC, id DESC
LIMIT $5

-- name: get_execution
-- One execution by id within a tenant (NULL tenant: any tenant).
SELECT * FROM executions WHERE id = $1 AND ($2::text IS NULL OR tenant = $2)

-- name: execution_ids_in_range
-- Ids from $1 to $2 in order, at most $3: those a short id begins (its digits then 0s, then fs).
SELECT DISTINCT id FROM executions WHERE id BETWEEN $1 AND $2 ORDER BY id LIMIT $3

-- name: release_running
-- Shutdown: give this worker's unfinished executions back, due now (horae_release).
SELECT horae_release($1, $2::uuid[], $3)

-- name: promise
-- The worker's promise to start what it claimed ahead due up to now + $2, its grace $3; of
-- $4 at $5 (claims ahead), those still its own (horae_promise).
SELECT alive_until, written_at, mine FROM horae_promise($1, $2, $3, $4::uuid[], $5::timestamptz[])

-- name: forget_claims_ahead
-- A worker starting up: what its identity still holds claimed ahead and unrecorded (a
-- previous process of it) goes back to `scheduled` (horae_forget_claims_ahead).
SELECT horae_forget_claims_ahead($1)

-- name: heartbeat
-- Extend the leases of the executions this worker still works on (horae_heartbeat).
SELECT id, cancel_requested FROM horae_heartbeat($1, $2, $3, $4::uuid[])

-- name: await_catalog
-- Wait until no change of the catalog (lock_catalog's lock: a move of shards) is in progress.
-- Shared, and held only for this statement: it waits for a change, never for another waiter.
SELECT pg_advisory_xact_lock_shared(hashtext('horae_catalog'))

-- name: recent_of_job
-- A job's newest executions that were dispatched or resolved (what Execution mirrors show):
-- the newest of each ended status through executions_job_status, and the queued and running
-- ones through executions_job_live, merged.
SELECT * FROM (
    SELECT e.* FROM unnest(enum_range(NULL::execution_status)) AS s(status)
    CROSS JOIN LATERAL (
        SELECT * FROM executions x
        WHERE x.job_id = $1 AND x.status = s.status
          AND x.status NOT IN ('scheduled', 'queued', 'running')
        ORDER BY x.due_at DESC, x.id DESC
        LIMIT $2) e
    WHERE s.status NOT IN ('scheduled', 'queued', 'running')
    UNION ALL
    SELECT * FROM executions WHERE job_id = $1 AND status IN ('queued', 'running')
) a
ORDER BY due_at DESC, id DESC
LIMIT $2

-- name: recent_of_job_by_outcome
-- A job's queued and running executions, its $2 newest succeeded ones and its $3 newest that
-- ended otherwise (what Execution mirrors show under CronJob-style history limits); each
-- status through its own probe of executions_job_status.
(SELECT * FROM executions WHERE job_id = $1 AND status IN ('queued', 'running'))
UNION ALL
(SELECT * FROM executions
 WHERE job_id = $1 AND status = 'succeeded' AND status NOT IN ('queued', 'running')
 ORDER BY due_at DESC, id DESC LIMIT $2)
UNION ALL
(SELECT * FROM (
    SELECT e.* FROM unnest('{failed, timed_out, dead, cancelled, skipped}'::execution_status[])
         AS s(status)
    CROSS JOIN LATERAL (
        SELECT * FROM executions x
        WHERE x.job_id = $1 AND x.status = s.status AND x.status NOT IN ('queued', 'running')
        ORDER BY x.due_at DESC, x.id DESC
        LIMIT $3) e
 ) a
 ORDER BY due_at DESC, id DESC LIMIT $3)

-- name: job_run_times
-- When a job's newest dispatched scheduled occurrence was due (nominally: manual runs and
-- retries left out; newest by occurrence, through executions_occurrence and, for a
-- cancelled one, executions_occurrence_rest) and when its newest succeeded execution
-- finished (through executions_job_status): a ScheduledJob's status.lastScheduleTime and
-- status.lastSuccessfulTime.
SELECT greatest(
           (SELECT occurrence_at FROM executions
            WHERE job_id = $1 AND attempt = 1 AND status <> 'cancelled' AND NOT manual
              AND (enqueued_at IS NOT NULL OR started_at IS NOT NULL)
            ORDER BY occurrence_at DESC LIMIT 1),
           (SELECT occurrence_at FROM executions
            WHERE job_id = $1 AND attempt = 1 AND status = 'cancelled' AND NOT manual
              AND (enqueued_at IS NOT NULL OR started_at IS NOT NULL)
            ORDER BY occurrence_at DESC LIMIT 1)) AS last_schedule,
       (SELECT finished_at FROM executions
        WHERE job_id = $1 AND status = 'succeeded' AND status NOT IN ('queued', 'running')
        ORDER BY due_at DESC, id DESC LIMIT 1) AS last_success

-- name: shard_moved_out
-- Whether shard $1 moved out of this store group (its dispatch here was fenced out by a move).
SELECT coalesce((SELECT moved_out FROM shard_epochs WHERE shard = $1), false)

-- name: insert_backfill
-- Record a new backfill (running); a Backfill resource's is made once per resource uid: the
-- existing one is answered.
WITH new AS (
    INSERT INTO backfills (id, tenant, job_id, shard, source, crd_uid, cron, time_zone, from_at,
                           to_at, rate, overlap, total, fed_at, created_at, updated_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $14, $14)
    ON CONFLICT (crd_uid) DO NOTHING
    RETURNING *
)
SELECT * FROM new
UNION ALL
SELECT * FROM backfills WHERE crd_uid = $6 AND NOT EXISTS (SELECT 1 FROM new)

-- name: get_backfill
-- One backfill by id within a tenant (NULL tenant: any tenant).
SELECT * FROM backfills WHERE id = $1 AND ($2::text IS NULL OR tenant = $2)

-- name: backfill_of_resource
-- The backfill a Backfill resource (its metadata.uid) made, if any.
SELECT * FROM backfills WHERE crd_uid = $1

-- name: job_backfills
-- A job's backfills within a tenant, newest first.
SELECT * FROM backfills WHERE job_id = $1 AND tenant = $2
ORDER BY created_at DESC, id DESC
LIMIT $3

-- name: backfill_outcomes
-- How many of a backfill's executions are in each status.
SELECT status, count(*) AS n FROM executions WHERE backfill = $1 GROUP BY status

-- name: cancel_backfill
-- Cancel a running backfill (of a tenant; NULL: any), saying why; answers it when it was running.
UPDATE backfills SET state = 'cancelled', message = $3, finished_at = $4, updated_at = $4
WHERE id = $1 AND ($2::text IS NULL OR tenant = $2) AND state = 'running'
RETURNING id

-- name: cancel_backfill_executions
-- A cancelled backfill's executions not claimed yet (published or not) end cancelled.
UPDATE executions SET status = 'cancelled', finished_at = $2, error_kind = 'cancelled',
       error_message = 'backfill cancelled'
WHERE backfill = $1 AND status = 'scheduled'

-- name: running_backfills
-- The running backfills of these shards, with their jobs' state and what is live of each.
SELECT b.*, j.state AS job_state, j.task, j.spec_version,
       (SELECT count(*) FROM executions x
        WHERE x.backfill = b.id AND x.status IN ('scheduled', 'queued', 'running')) AS live
FROM backfills b JOIN jobs j ON j.id = b.job_id
WHERE b.shard = ANY($1::smallint[]) AND b.state = 'running'
ORDER BY b.created_at, b.id

-- name: lock_backfill_feed
-- Lock a backfill to feed it, when it is still running from the cursor the feeder read (a
-- cancel waits for the feed's transaction, or the feed finds it cancelled).
SELECT id FROM backfills
WHERE id = $1 AND state = 'running' AND cursor_at IS NOT DISTINCT FROM $2::timestamptz
FOR UPDATE

-- name: insert_backfill_executions
-- Fenced by the caller: a backfill's slice of occurrences, due $8, tagged with it; an
-- occurrence that already has a live or ended first attempt is left alone. Overlap with the
-- job's other runs is never judged (Allow), nor a starting deadline. Told to the shard.
WITH inserted AS (
    INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,
                            job_version, status, created_at, concurrency_policy, backfill)
    SELECT u.id, $2, $3, $4, $5, $8, u.occurrence_at, 1, $6, 'scheduled', $8, 'Allow', $7
    FROM unnest($1::uuid[], $9::timestamptz[]) AS u(id, occurrence_at)
    WHERE NOT EXISTS (
        SELECT 1 FROM executions x
        WHERE x.job_id = $2 AND x.occurrence_at = u.occurrence_at
          AND x.due_at >= u.occurrence_at - interval '1 day'
          AND x.attempt = 1 AND x.status <> 'cancelled')
    ON CONFLICT (job_id, occurrence_at, due_at, shard) WHERE attempt = 1 AND status <> 'cancelled'
    DO NOTHING
    RETURNING id, shard, due_at
), notified AS (
    -- what the scheduler reads of the new rows (migration 021)
    SELECT horae_notify_new(array_agg(id), array_agg(shard), array_agg(due_at)) AS told
    FROM inserted
)
SELECT count(*) AS inserted FROM inserted WHERE (SELECT count(*) FROM notified) >= 0

-- name: advance_backfill
-- Record a fed slice: the cursor, what was created and what had a run already, the rate's clock.
UPDATE backfills SET cursor_at = $2, created = created + $3, existing = existing + $4,
       fed_at = $5, updated_at = $6
WHERE id = $1 AND state = 'running'

-- name: complete_backfill
-- A backfill fed to its end whose executions all ended is completed.
UPDATE backfills b SET state = 'completed', finished_at = $2, updated_at = $2
WHERE b.id = $1 AND b.state = 'running' AND b.created + b.existing = b.total
  AND NOT EXISTS (SELECT 1 FROM executions x
                  WHERE x.backfill = b.id AND x.status IN ('scheduled', 'queued', 'running'))
RETURNING id

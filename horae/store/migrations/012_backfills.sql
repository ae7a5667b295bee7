-- Backfills: a past range [from_at, to_at) of a cron job's occurrences run now, as ordinary
-- executions tagged with the backfill (`executions.backfill`, NULL for every other run), fed
-- by the scheduler owning the job's shard at most `rate` a second (`horae/scheduler/backfill.py`).

CREATE TYPE backfill_state AS ENUM ('running', 'completed', 'cancelled');

CREATE TABLE backfills (
    id          uuid PRIMARY KEY,
    tenant      text NOT NULL,
    job_id      uuid NOT NULL,
    shard       smallint NOT NULL CHECK (shard >= 0),
    source      text NOT NULL CHECK (source IN ('crd', 'api')),
    crd_uid     text UNIQUE,          -- the Backfill resource's metadata.uid (operator)
    cron        text NOT NULL,        -- the job's schedule when the backfill was created:
    time_zone   text NOT NULL,        -- its occurrences (and so `total`) do not move with edits
    from_at     timestamptz NOT NULL,
    to_at       timestamptz NOT NULL,
    rate        integer NOT NULL CHECK (rate BETWEEN 1 AND 1000),
    overlap     text NOT NULL CHECK (overlap IN ('Allow', 'Forbid')),
    state       backfill_state NOT NULL DEFAULT 'running',
    cursor_at   timestamptz,          -- the last occurrence fed (NULL: none yet)
    total       integer NOT NULL CHECK (total BETWEEN 1 AND 1000000),
    created     integer NOT NULL DEFAULT 0 CHECK (created >= 0),
    existing    integer NOT NULL DEFAULT 0 CHECK (existing >= 0),  -- had a run already
    fed_at      timestamptz NOT NULL, -- the rate's clock: occurrences are owed from here on
    message     text,                 -- why it was cancelled
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    finished_at timestamptz,
    CONSTRAINT backfills_range CHECK (from_at < to_at),
    CONSTRAINT backfills_fed CHECK (created + existing <= total),
    CONSTRAINT backfills_finished CHECK ((state = 'running') = (finished_at IS NULL)),
    CONSTRAINT backfills_cursor CHECK (cursor_at IS NULL OR (cursor_at >= from_at AND cursor_at < to_at))
);

CREATE INDEX backfills_running ON backfills (shard) WHERE state = 'running';
CREATE INDEX backfills_job ON backfills (job_id, created_at);

ALTER TABLE executions ADD COLUMN backfill uuid;
CREATE INDEX executions_backfill ON executions (backfill, status) WHERE backfill IS NOT NULL;

-- The API and the operator create, read and cancel backfills (and cancel their pending
-- executions: the UPDATE grants of 004); the scheduler feeds them and ends them.
GRANT SELECT, INSERT, UPDATE (state, message, updated_at, finished_at) ON backfills
    TO horae_api, horae_operator;
GRANT SELECT, UPDATE (state, cursor_at, created, existing, fed_at, message, updated_at,
                      finished_at) ON backfills TO horae_scheduler;

-- As in 004, but a backfilled execution (an old occurrence run now) never schedules its job's
-- next occurrence: `AND e.backfill IS NULL` in `held`, nothing else changed.
CREATE OR REPLACE FUNCTION horae_schedule_next(
    p_owner text, p_ids uuid[], p_dues timestamptz[], p_new_ids uuid[],
    p_next_dues timestamptz[], p_next_occurrences timestamptz[], p_now timestamptz,
    p_notify_before timestamptz
) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    n integer;
BEGIN
    WITH held AS (
        SELECT u.new_id, e.job_id, e.tenant, e.task, e.shard, u.next_due, u.next_occurrence,
               e.job_version, j.starting_deadline_seconds, j.concurrency_policy
        FROM unnest(p_ids, p_dues, p_new_ids, p_next_dues, p_next_occurrences)
             AS u(id, due_at, new_id, next_due, next_occurrence)
        JOIN executions e ON e.id = u.id AND e.due_at = u.due_at
        JOIN jobs j ON j.id = e.job_id
        WHERE e.status = 'running' AND e.lease_owner = p_owner AND e.attempt = 1
          AND e.backfill IS NULL
          AND j.state = 'active' AND j.cron IS NOT NULL AND j.spec_version = e.job_version
          AND u.next_occurrence > e.occurrence_at
          AND NOT EXISTS (
              SELECT 1 FROM executions x
              WHERE x.job_id = e.job_id AND x.occurrence_at > e.occurrence_at
                AND x.due_at >= e.occurrence_at - interval '1 day'
                AND x.attempt = 1 AND x.status <> 'cancelled')
    ), inserted AS (
        INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,
                                job_version, status, created_at, starting_deadline_seconds,
                                concurrency_policy)
        SELECT h.new_id, h.job_id, h.tenant, h.task, h.shard, h.next_due, h.next_occurrence, 1,
               h.job_version, 'scheduled', p_now, h.starting_deadline_seconds,
               h.concurrency_policy
        FROM held h
        ON CONFLICT (job_id, occurrence_at, due_at, shard)
            WHERE attempt = 1 AND status <> 'cancelled' DO NOTHING
        RETURNING executions.id, executions.job_id, executions.shard, executions.due_at,
                  executions.occurrence_at
    ), next_runs AS (
        UPDATE jobs j SET next_run_at = i.occurrence_at, updated_at = p_now
        FROM inserted i WHERE j.id = i.job_id
        RETURNING j.id
    ), notified AS (
        SELECT pg_notify('horae_shard_' || s.shard::text,
                         (extract(epoch FROM s.due_at) * 1000000)::bigint::text || ' '
                         || ('x' || left(replace(s.id::text, '-', ''), 12))::bit(48)::bigint::text)
        FROM (SELECT DISTINCT ON (i.shard) i.shard, i.due_at, i.id FROM inserted i
              WHERE i.due_at < p_notify_before ORDER BY i.shard, i.due_at, i.id) s
    )
    SELECT count(*) INTO n FROM inserted
    WHERE (SELECT count(*) FROM next_runs) >= 0 AND (SELECT count(*) FROM notified) >= 0;
    RETURN n;
END $$;

-- SECURITY DEFINER functions resolve names in Horae's schema only (CREATE OR REPLACE reset
-- the setting), as migration 004 sets it; its EXECUTE grant is kept.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION horae_schedule_next(text, uuid[], timestamptz[], uuid[],'
                   ' timestamptz[], timestamptz[], timestamptz, timestamptz)'
                   ' SET search_path = %I, pg_temp', current_schema());
END $$;

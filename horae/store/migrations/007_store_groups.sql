-- Store groups: the virtual shards spread over several PostgreSQL primaries (docs/architecture.md,
-- "Store groups"). Every group's database has the same schema; the catalog (which group holds
-- which shard, and where each group is) is kept in the first group's database, the one every
-- component's HORAE_DATABASE_URL names, and is empty elsewhere.

-- The groups: `address` is a PostgreSQL URL without credentials (each component connects
-- with its own, or with HORAE_STORE_GROUP_<NAME>_URL); NULL for the catalog's own database.
CREATE TABLE store_groups (
    name      text PRIMARY KEY CHECK (name ~ '^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$'),
    address   text CHECK ((name = 'main') = (address IS NULL)),
    added_at  timestamptz NOT NULL DEFAULT now()
);

-- Which group holds each shard (its jobs and their executions); one row per shard.
CREATE TABLE shard_placement (
    shard       smallint PRIMARY KEY CHECK (shard >= 0),
    group_name  text NOT NULL REFERENCES store_groups (name),
    placed_at   timestamptz NOT NULL DEFAULT now()
);

-- The catalog's version: bumped by every change of the two tables above, announced on
-- NOTIFY horae_catalog; components re-read the catalog when it moves.
CREATE TABLE catalog_version (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version    bigint NOT NULL DEFAULT 1
);

-- A move reads (and a repair clears) a shard's jobs by shard.
CREATE INDEX jobs_shard ON jobs (shard);

-- A shard moved out of this group: its rows here are history (read-only), the scheduler may
-- not take it here, and jobs are no longer created for it here (horae_shards_moved_out).
ALTER TABLE shard_epochs ADD COLUMN moved_out boolean NOT NULL DEFAULT false;

-- A tenant's share of its `max_running` in this group (the scheduler's allowance rebalancer
-- sets it when the store has several groups, lowering one group's before raising another's,
-- each under the tenant's claim lock, so the shares never add up to more than the limit).
-- NULL: the whole limit (one group).
ALTER TABLE tenants ADD COLUMN allowance integer CHECK (allowance IS NULL OR allowance >= 0);

-- Which of `p_shards` moved out of this group, share-locked for the caller's transaction: a
-- creator of jobs calls it before inserting them, so a move (which marks the shard moved out
-- under a row lock first) and a create never cross.
CREATE FUNCTION horae_shards_moved_out(p_shards smallint[]) RETURNS smallint[]
LANGUAGE sql SECURITY DEFINER AS $$
    WITH locked AS (
        SELECT s.shard, s.moved_out FROM shard_epochs s
        WHERE s.shard = ANY (p_shards) ORDER BY s.shard FOR SHARE
    )
    SELECT coalesce(array_agg(shard) FILTER (WHERE moved_out), '{}') FROM locked
$$;
REVOKE ALL ON FUNCTION horae_shards_moved_out(smallint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION horae_shards_moved_out(smallint[]) TO horae_api, horae_operator;

-- The catalog holds no tenant's data: every component reads it (the worker too, to route
-- its claims and outcomes; the shard count is the placement's length).
GRANT SELECT ON store_groups, shard_placement, catalog_version TO
    horae_api, horae_operator, horae_scheduler, horae_worker;
GRANT SELECT (moved_out) ON shard_epochs TO horae_scheduler;
-- The scheduler's allowance rebalancer writes each group's copy of a tenant's limit.
GRANT SELECT (name, max_running, allowance), INSERT (name, max_running, allowance),
    UPDATE (max_running, allowance) ON tenants TO horae_scheduler;

-- A limited tenant's claims count against its allowance in this group (when set).
CREATE OR REPLACE FUNCTION horae_claim(
    p_ids uuid[], p_dues timestamptz[], p_named text[], p_serves text[], p_owner text,
    p_now timestamptz, p_lease interval, p_throttle interval
) RETURNS TABLE (
    outcome text, id uuid, job_id uuid, tenant text, task text, shard smallint,
    due_at timestamptz, occurrence_at timestamptz, attempt integer, job_version integer,
    payload jsonb, timeout_seconds integer, retry_policy jsonb, run_at timestamptz,
    source text, name text, unrecorded boolean, cron text, time_zone text,
    jitter_seconds integer, concurrency_policy text, starting_deadline_seconds integer,
    catch_up text
)
LANGUAGE plpgsql SECURITY DEFINER AS $$
#variable_conflict use_column
DECLARE
    lim record;
    r record;
    free integer;
    held uuid[] := '{}';
    claimed uuid[] := '{}';
    told uuid[] := '{}';
    shards smallint[] := '{}';
BEGIN
    -- Every statement below touches only rows this worker may run: of a tenant it serves
    -- (p_serves) and the one its message named (p_named). Any other row is refused at the
    -- end, untouched.
    --
    -- Limits are judged by the rows' own tenants (never by what a message says), each
    -- limited tenant locked in name order so that claims never deadlock on them.
    IF EXISTS (SELECT 1 FROM tenants t WHERE t.max_running IS NOT NULL) THEN
        -- First lock every row of the batch it may run, in id order, as the scheduler's
        -- mark_queued locks them: the loop below locks one limited tenant's rows at a
        -- time, and a claim holding a later row of one tenant while it waited for an
        -- earlier row deadlocked with a dispatch record holding that earlier row.
        PERFORM 1 FROM executions e
        JOIN unnest(p_ids, p_dues, p_named) AS u(id, due_at, named)
          ON e.id = u.id AND e.due_at = u.due_at
        WHERE e.status IN ('queued', 'scheduled')
          AND e.tenant = u.named AND e.tenant = ANY (p_serves)
        ORDER BY e.id
        FOR UPDATE OF e;
        FOR lim IN
            SELECT t.name, coalesce(t.allowance, t.max_running) AS max_running FROM tenants t
            WHERE t.max_running IS NOT NULL AND t.name IN (
                SELECT e.tenant FROM executions e
                JOIN unnest(p_ids, p_dues, p_named) AS u(id, due_at, named)
                  ON e.id = u.id AND e.due_at = u.due_at
                WHERE e.status IN ('queued', 'scheduled')
                  AND e.tenant = u.named AND e.tenant = ANY (p_serves))
            ORDER BY t.name
        LOOP
            PERFORM pg_advisory_xact_lock(hashtext('horae_tenant:' || lim.name));
            SELECT greatest(0, lim.max_running - count(*)) INTO free
            FROM executions e WHERE e.tenant = lim.name AND e.status = 'running';
            -- Throttled rows are answered first, while the other answer columns are NULL.
            FOR r IN
                WITH over AS (
                    SELECT e.id, e.due_at FROM executions e
                    JOIN (SELECT DISTINCT * FROM unnest(p_ids, p_dues, p_named))
                         AS u(id, due_at, named)
                      ON e.id = u.id AND e.due_at = u.due_at
                    WHERE e.tenant = lim.name AND u.named = lim.name
                      AND e.status IN ('queued', 'scheduled')
                    ORDER BY e.id
                    OFFSET free
                    FOR UPDATE OF e
                )
                UPDATE executions e
                SET status = 'scheduled', due_at = p_now + p_throttle * (1 + random() / 2),
                    enqueued_at = NULL, dispatch_epoch = NULL
                FROM over o
                WHERE e.id = o.id AND e.due_at = o.due_at
                RETURNING e.id, e.due_at, e.shard
            LOOP
                outcome := 'throttled';
                id := r.id;
                due_at := r.due_at;
                RETURN NEXT;
                held := held || r.id;
                shards := shards || r.shard;
            END LOOP;
        END LOOP;
        PERFORM pg_notify('horae_shard_' || s.shard::text, 'throttled')
        FROM (SELECT DISTINCT x AS shard FROM unnest(shards) AS x ORDER BY 1) s;
    END IF;
    -- Rows are locked in id order, as the scheduler's mark_queued locks them.
    FOR r IN
        WITH target AS (
            SELECT e.id, e.due_at, e.status = 'scheduled' AS unrecorded
            FROM executions e JOIN unnest(p_ids, p_dues, p_named) AS u(id, due_at, named)
              ON e.id = u.id AND e.due_at = u.due_at
            WHERE e.status IN ('queued', 'scheduled') AND e.id <> ALL (held)
              AND e.tenant = u.named AND e.tenant = ANY (p_serves)
            ORDER BY e.id
            FOR UPDATE OF e
        )
        UPDATE executions e
        SET status = 'running', lease_owner = p_owner, lease_until = p_now + p_lease,
            started_at = p_now
        FROM target t, jobs j
        WHERE e.id = t.id AND e.due_at = t.due_at
          AND j.id = e.job_id AND j.state = 'active' AND j.spec_version = e.job_version
        RETURNING e.id, e.job_id, e.tenant, e.task, e.shard, e.due_at, e.occurrence_at,
                  e.attempt, e.job_version, j.payload, j.timeout_seconds, j.retry_policy,
                  j.run_at, j.source, j.name, t.unrecorded, j.cron, j.time_zone,
                  j.jitter_seconds, j.concurrency_policy, j.starting_deadline_seconds,
                  j.catch_up
    LOOP
        outcome := 'claimed';
        id := r.id; job_id := r.job_id; tenant := r.tenant; task := r.task;
        shard := r.shard; due_at := r.due_at; occurrence_at := r.occurrence_at;
        attempt := r.attempt; job_version := r.job_version; payload := r.payload;
        timeout_seconds := r.timeout_seconds; retry_policy := r.retry_policy;
        run_at := r.run_at; source := r.source; name := r.name; unrecorded := r.unrecorded;
        cron := r.cron; time_zone := r.time_zone; jitter_seconds := r.jitter_seconds;
        concurrency_policy := r.concurrency_policy;
        starting_deadline_seconds := r.starting_deadline_seconds; catch_up := r.catch_up;
        RETURN NEXT;
        claimed := claimed || r.id;
        IF r.source = 'crd' THEN
            told := told || r.job_id;  -- its Execution resource shows Running
        END IF;
    END LOOP;
    -- Only when something was left (rare): rows not this worker's are refused ('refused',
    -- with the row's tenant), exactly as they were; then dispatched executions whose job
    -- was paused, cancelled or edited are cancelled, never run.
    IF cardinality(claimed) + cardinality(held) < cardinality(p_ids) THEN
        -- The answer's other columns still hold the last claimed row's: cleared.
        job_id := NULL; task := NULL; shard := NULL; occurrence_at := NULL; attempt := NULL;
        job_version := NULL; payload := NULL; timeout_seconds := NULL; retry_policy := NULL;
        run_at := NULL; source := NULL; name := NULL; unrecorded := NULL; cron := NULL;
        time_zone := NULL; jitter_seconds := NULL; concurrency_policy := NULL;
        starting_deadline_seconds := NULL; catch_up := NULL;
        FOR r IN
            SELECT e.id, e.due_at, e.tenant FROM executions e
            JOIN unnest(p_ids, p_dues, p_named) AS u(id, due_at, named)
              ON e.id = u.id AND e.due_at = u.due_at
            WHERE e.status IN ('queued', 'scheduled')
              AND (e.tenant <> ALL (p_serves) OR e.tenant IS DISTINCT FROM u.named)
        LOOP
            outcome := 'refused';
            id := r.id;
            due_at := r.due_at;
            tenant := r.tenant;
            RETURN NEXT;
            held := held || r.id;
        END LOOP;
        FOR r IN
            UPDATE executions e SET status = 'cancelled', finished_at = p_now,
                   error_kind = 'stale',
                   error_message = 'job ' || j.state::text || ' or edited (version '
                                   || j.spec_version::text || ') before this execution started'
            FROM unnest(p_ids, p_dues) AS u(id, due_at), jobs j
            WHERE e.id = u.id AND e.due_at = u.due_at AND e.status IN ('queued', 'scheduled')
              AND e.id <> ALL (held)
              AND j.id = e.job_id AND NOT (j.state = 'active' AND j.spec_version = e.job_version)
            RETURNING e.job_id
        LOOP
            told := told || r.job_id;
        END LOOP;
    END IF;
    PERFORM pg_notify('horae_job_events', s.job_id::text)
    FROM (SELECT DISTINCT x AS job_id FROM unnest(told) AS x ORDER BY 1) s;
END $$;

-- SECURITY DEFINER functions resolve names in Horae's schema only (CREATE OR REPLACE reset
-- horae_claim's setting), as migration 004 sets it.
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'horae_claim(uuid[], timestamptz[], text[], text[], text, timestamptz, interval, interval)',
        'horae_shards_moved_out(smallint[])'
    ]
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
    END LOOP;
END $$;

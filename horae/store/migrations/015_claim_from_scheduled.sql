-- Dispatch no longer marks what it published `queued` (docs/architecture.md, "The path of
-- one execution"): a published execution stays `scheduled` until a worker claims it, so an
-- execution writes one row version fewer (its heap tuple, an entry in every index that all
-- versions enter, a row lock). Rows marked `queued` by earlier releases are still claimed,
-- republished and shown as they were.
--
-- What the claim's `unrecorded` answer told a worker, "the scheduler has not recorded this
-- dispatch, so schedule the job's next occurrence yourself", was read from the row still
-- being `scheduled`, which is now every claim's case. It is now read from the record itself:
-- a cron job's first attempt whose next occurrence is not scheduled yet (uncommitted, or
-- never to be: the dispatch round failed after its publish). A claim racing the round's
-- commit finds it missing and schedules it too; the unique occurrence index keeps one.
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
        -- First lock every row of the batch it may run, in id order, as every batched
        -- writer locks them: the loop below locks one limited tenant's rows at a time, and
        -- a claim holding a later row of one tenant while it waited for an earlier row
        -- deadlocked with a batched writer holding that earlier row.
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
    -- Rows are locked in id order, as every batched writer locks them.
    FOR r IN
        WITH target AS (
            SELECT e.id, e.due_at, e.status = 'scheduled' AS undispatched
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
                  j.run_at, j.source, j.name,
                  -- A cron job's first attempt (not backfilled) whose next occurrence the
                  -- scheduler has not recorded: the worker schedules it.
                  CASE WHEN t.undispatched AND j.cron IS NOT NULL AND e.attempt = 1
                            AND e.backfill IS NULL
                       THEN NOT EXISTS (
                           SELECT 1 FROM executions n
                           WHERE n.job_id = e.job_id AND n.attempt = 1
                             AND n.status <> 'cancelled' AND n.backfill IS NULL
                             AND NOT n.manual AND n.occurrence_at > e.occurrence_at
                             AND n.due_at >= e.occurrence_at)
                       ELSE false END AS unrecorded,
                  j.cron, j.time_zone,
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
BEGIN
    EXECUTE format(
        'ALTER FUNCTION horae_claim(uuid[], timestamptz[], text[], text[], text, timestamptz, '
        'interval, interval) SET search_path = %I, pg_temp', current_schema());
END $$;

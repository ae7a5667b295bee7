-- Tenants stay apart in the claim (docs/security.md): a worker names the tenants it serves
-- and, for each execution, the tenant its message named; an execution whose row belongs to
-- another tenant, or whose message lied about it, is refused ('refused', row untouched) and
-- never run. Limits remain the rows' tenants'. Replaces migration 004's horae_claim.

DROP FUNCTION horae_claim(uuid[], timestamptz[], text, timestamptz, interval, interval);

CREATE FUNCTION horae_claim(
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
    refused uuid[] := '{}';
    claimed uuid[] := '{}';
    told uuid[] := '{}';
    shards smallint[] := '{}';
BEGIN
    -- Not this worker's to run: a row whose tenant it does not serve, or whose message
    -- named another tenant than the row's. Answered 'refused' (with the row's tenant) and
    -- left exactly as it was.
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
        refused := refused || r.id;
    END LOOP;
    held := refused;
    -- Limits are judged by the rows' own tenants (never by what a message says), each
    -- limited tenant locked in name order so that claims never deadlock on them.
    IF EXISTS (SELECT 1 FROM tenants t WHERE t.max_running IS NOT NULL) THEN
        FOR lim IN
            SELECT t.name, t.max_running FROM tenants t
            WHERE t.max_running IS NOT NULL AND t.name IN (
                SELECT e.tenant FROM executions e
                JOIN unnest(p_ids, p_dues) AS u(id, due_at) ON e.id = u.id AND e.due_at = u.due_at
                WHERE e.status IN ('queued', 'scheduled') AND e.id <> ALL (refused))
            ORDER BY t.name
        LOOP
            PERFORM pg_advisory_xact_lock(hashtext('horae_tenant:' || lim.name));
            SELECT greatest(0, lim.max_running - count(*)) INTO free
            FROM executions e WHERE e.tenant = lim.name AND e.status = 'running';
            -- Throttled rows are answered first, while the other answer columns are NULL.
            FOR r IN
                WITH over AS (
                    SELECT e.id, e.due_at FROM executions e
                    JOIN (SELECT DISTINCT * FROM unnest(p_ids, p_dues)) AS u(id, due_at)
                      ON e.id = u.id AND e.due_at = u.due_at
                    WHERE e.tenant = lim.name AND e.status IN ('queued', 'scheduled')
                      AND e.id <> ALL (refused)
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
            FROM executions e JOIN unnest(p_ids, p_dues) AS u(id, due_at)
              ON e.id = u.id AND e.due_at = u.due_at
            WHERE e.status IN ('queued', 'scheduled') AND e.id <> ALL (held)
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
    -- Dispatched executions whose job was paused, cancelled or edited: cancelled, never run.
    IF cardinality(claimed) + cardinality(held) < cardinality(p_ids) THEN
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

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION horae_claim(uuid[], timestamptz[], text[], text[], text, '
                   'timestamptz, interval, interval) SET search_path = %I, pg_temp',
                   current_schema());
END $$;
REVOKE ALL ON FUNCTION
    horae_claim(uuid[], timestamptz[], text[], text[], text, timestamptz, interval, interval)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    horae_claim(uuid[], timestamptz[], text[], text[], text, timestamptz, interval, interval)
    TO horae_worker;

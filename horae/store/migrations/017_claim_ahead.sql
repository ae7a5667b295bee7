-- Claim ahead (docs/architecture.md, "The path of one execution"): a worker claims an
-- execution published ahead of its due time (the scheduler's dispatch lead) when its message
-- arrives, rather than at the due time, so that what a burst due at one instant costs the
-- database and the workers is spent before the instant; its handler still starts at the due
-- time by Postgres's clock.
--
-- - horae_claim: a row not yet due (due_at > p_now) is claimed with its lease counted from
--   its due time and no start time (started_at NULL: claimed, not started); a limited
--   tenant's such row is answered 'early' and left alone (claimed once due, as before).
-- - horae_finish takes the time each handler started (started_at): a claim ahead has none,
--   and a claim's own stamp is no longer the start. The 11-argument form stays, for workers
--   of an earlier release during an upgrade.
-- - horae_heartbeat never shortens a lease (one claimed ahead runs from its due time).
-- - horae_release (a stopping worker's hand-back) never makes a row due earlier than it was.

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
        WHERE e.status IN ('queued', 'scheduled') AND e.due_at <= p_now
          AND e.tenant = u.named AND e.tenant = ANY (p_serves)
        ORDER BY e.id
        FOR UPDATE OF e;
        FOR lim IN
            SELECT t.name, coalesce(t.allowance, t.max_running) AS max_running FROM tenants t
            WHERE t.max_running IS NOT NULL AND t.name IN (
                SELECT e.tenant FROM executions e
                JOIN unnest(p_ids, p_dues, p_named) AS u(id, due_at, named)
                  ON e.id = u.id AND e.due_at = u.due_at
                WHERE e.status IN ('queued', 'scheduled') AND e.due_at <= p_now
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
                      AND e.status IN ('queued', 'scheduled') AND e.due_at <= p_now
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
    -- A limited tenant's row not yet due is not claimed ahead: its limit counts running
    -- rows, and one claimed ahead would take a slot before it runs. Answered 'early' and
    -- left as it was; the worker claims it again once it is due.
    IF EXISTS (SELECT 1 FROM tenants t WHERE t.max_running IS NOT NULL) THEN
        FOR r IN
            SELECT e.id, e.due_at FROM executions e
            JOIN unnest(p_ids, p_dues, p_named) AS u(id, due_at, named)
              ON e.id = u.id AND e.due_at = u.due_at
            JOIN tenants t ON t.name = e.tenant AND t.max_running IS NOT NULL
            WHERE e.status IN ('queued', 'scheduled') AND e.due_at > p_now
              AND e.tenant = u.named AND e.tenant = ANY (p_serves)
        LOOP
            outcome := 'early';
            id := r.id;
            due_at := r.due_at;
            RETURN NEXT;
            held := held || r.id;
        END LOOP;
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
        SET status = 'running', lease_owner = p_owner,
            -- claimed ahead of its due time: its lease runs from the due time, and it has
            -- not started (the worker records when its handler began with the outcome)
            lease_until = greatest(p_now, e.due_at) + p_lease,
            started_at = CASE WHEN e.due_at > p_now THEN NULL ELSE p_now END
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


CREATE FUNCTION horae_finish(
    p_ids uuid[], p_dues timestamptz[], p_statuses execution_status[], p_kinds text[],
    p_messages text[], p_results jsonb[], p_retry_ats timestamptz[], p_retry_ids uuid[],
    p_owner text, p_now timestamptz, p_notify_before timestamptz, p_started timestamptz[]
) RETURNS SETOF uuid
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    done_ids uuid[];
    done_jobs uuid[];
    done_statuses execution_status[];
    done_finals boolean[];
    done_messages text[];
BEGIN
    WITH target AS (
        SELECT e.id, e.due_at, u.status, u.error_kind, u.error_message, u.result, u.retry_at,
               u.retry_id, u.started
        FROM executions e
        JOIN unnest(p_ids, p_dues, p_statuses, p_kinds, p_messages, p_results, p_retry_ats,
                    p_retry_ids, p_started)
             AS u(id, due_at, status, error_kind, error_message, result, retry_at, retry_id,
                  started)
          ON e.id = u.id AND e.due_at = u.due_at
        WHERE e.status = 'running' AND e.lease_owner = p_owner
        ORDER BY e.id
        FOR UPDATE OF e
    ), finished AS (
        UPDATE executions e SET status = t.status, finished_at = p_now,
               error_kind = t.error_kind, error_message = t.error_message, result = t.result,
               lease_until = NULL, started_at = coalesce(t.started, e.started_at)
        FROM target t
        WHERE e.id = t.id AND e.due_at = t.due_at
        RETURNING e.id, e.job_id, e.tenant, e.task, e.shard, e.occurrence_at, e.attempt,
                  e.job_version, e.manual, t.status, t.error_message, t.retry_at, t.retry_id
    ), retried AS (
        INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at,
                                attempt, job_version, status, created_at,
                                starting_deadline_seconds, concurrency_policy, manual)
        SELECT f.retry_id, f.job_id, f.tenant, f.task, f.shard, f.retry_at, f.occurrence_at,
               f.attempt + 1, f.job_version, 'scheduled', p_now, j.starting_deadline_seconds,
               j.concurrency_policy, f.manual
        FROM finished f JOIN jobs j ON j.id = f.job_id
        WHERE f.retry_at IS NOT NULL
        RETURNING executions.id, executions.shard, executions.due_at
    ), retry_notified AS (
        SELECT pg_notify('horae_shard_' || s.shard::text,
                         (extract(epoch FROM s.due_at) * 1000000)::bigint::text || ' '
                         || ('x' || left(replace(s.id::text, '-', ''), 12))::bit(48)::bigint::text)
        FROM (SELECT DISTINCT ON (r.shard) r.shard, r.due_at, r.id FROM retried r
              WHERE r.due_at < p_notify_before ORDER BY r.shard, r.due_at, r.id) s
    )
    SELECT coalesce(array_agg(f.id ORDER BY f.id), '{}'),
           coalesce(array_agg(f.job_id ORDER BY f.id), '{}'),
           coalesce(array_agg(f.status ORDER BY f.id), '{}'),
           coalesce(array_agg(f.retry_at IS NULL ORDER BY f.id), '{}'),
           coalesce(array_agg(f.error_message ORDER BY f.id), '{}')
    INTO done_ids, done_jobs, done_statuses, done_finals, done_messages
    FROM finished f
    WHERE (SELECT count(*) FROM retry_notified) >= 0;
    -- a job's last outcome in the batch is its last by execution id, as before
    PERFORM horae_record_runs(done_jobs, done_statuses, done_finals, done_ids, done_messages,
                              p_now);
    RETURN QUERY SELECT unnest(done_ids);
END $$;

-- The earlier form: no start times (its workers' claims stamped them).
CREATE OR REPLACE FUNCTION horae_finish(
    p_ids uuid[], p_dues timestamptz[], p_statuses execution_status[], p_kinds text[],
    p_messages text[], p_results jsonb[], p_retry_ats timestamptz[], p_retry_ids uuid[],
    p_owner text, p_now timestamptz, p_notify_before timestamptz
) RETURNS SETOF uuid
LANGUAGE sql SECURITY DEFINER AS $$
    SELECT horae_finish(p_ids, p_dues, p_statuses, p_kinds, p_messages, p_results, p_retry_ats,
                        p_retry_ids, p_owner, p_now, p_notify_before, NULL::timestamptz[])
$$;

CREATE OR REPLACE FUNCTION horae_heartbeat(p_owner text, p_now timestamptz, p_lease interval, p_ids uuid[])
RETURNS TABLE (id uuid, cancel_requested boolean)
LANGUAGE plpgsql SECURITY DEFINER AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH target AS (
        SELECT e.id, e.due_at FROM executions e
        WHERE e.lease_owner = p_owner AND e.status = 'running' AND e.id = ANY (p_ids)
        ORDER BY e.id
        FOR UPDATE SKIP LOCKED
    )
    UPDATE executions e SET lease_until = greatest(e.lease_until, p_now + p_lease)
    FROM target t
    WHERE e.id = t.id AND e.due_at = t.due_at
    RETURNING e.id, e.cancel_requested;
END $$;

CREATE OR REPLACE FUNCTION horae_release(p_owner text, p_ids uuid[], p_now timestamptz) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    shards smallint[];
BEGIN
    WITH released AS (
        UPDATE executions e SET status = 'scheduled', due_at = greatest(e.due_at, p_now),
               lease_owner = NULL, lease_until = NULL, started_at = NULL, enqueued_at = NULL,
               dispatch_epoch = NULL
        WHERE e.lease_owner = p_owner AND e.status = 'running' AND e.id = ANY (p_ids)
        RETURNING e.shard
    )
    SELECT coalesce(array_agg(r.shard), '{}') INTO shards FROM released r;
    PERFORM pg_notify('horae_shard_' || s.shard::text, 'released')
    FROM (SELECT DISTINCT x AS shard FROM unnest(shards) AS x ORDER BY 1) s;
    RETURN cardinality(shards);
END $$;

-- SECURITY DEFINER functions resolve names in Horae's schema only, callable by the roles
-- named only, as migration 004 sets it (CREATE OR REPLACE reset the settings).
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'horae_claim(uuid[], timestamptz[], text[], text[], text, timestamptz, interval, interval)',
        'horae_finish(uuid[], timestamptz[], execution_status[], text[], text[], jsonb[],'
        ' timestamptz[], uuid[], text, timestamptz, timestamptz)',
        'horae_finish(uuid[], timestamptz[], execution_status[], text[], text[], jsonb[],'
        ' timestamptz[], uuid[], text, timestamptz, timestamptz, timestamptz[])',
        'horae_heartbeat(text, timestamptz, interval, uuid[])',
        'horae_release(text, uuid[], timestamptz)']::regprocedure[]
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END $$;
GRANT EXECUTE ON FUNCTION
    horae_finish(uuid[], timestamptz[], execution_status[], text[], text[], jsonb[],
                 timestamptz[], uuid[], text, timestamptz, timestamptz, timestamptz[])
    TO horae_worker;
-- The reaper gives an execution claimed ahead, whose worker died before recording it, back
-- to `scheduled` with no owner (`return_unstarted`).
GRANT UPDATE (lease_owner) ON executions TO horae_scheduler;

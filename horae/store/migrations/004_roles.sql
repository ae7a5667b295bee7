-- Least-privilege roles by component (docs/security.md). Four NOLOGIN group roles; the
-- administrator's login roles join them (`CREATE ROLE ... LOGIN ... IN ROLE horae_worker`).
-- Only `horae migrate` (this schema's owner) runs DDL: no role below may create anything.
--
-- The api, operator and scheduler get exactly the table privileges their named queries
-- need (UPDATE by column). The worker gets no table at all: its claim, heartbeat, outcome
-- and hand-back are the SECURITY DEFINER functions below, which act only on the rows the
-- caller names by (id, due_at) or holds by lease. So a worker's credential reads no job, no
-- tenant and no payload except those of the executions it claims. Its claim runs only the
-- tenants the worker names as served and each message named (docs/security.md), and a
-- shard's NOTIFY says when its earliest new execution is due and in which millisecond its
-- id was made, never the id: any role may LISTEN, and an id would let a stolen credential
-- claim it first.
--
-- Roles belong to the PostgreSQL cluster, grants to this database: a second database of the
-- same cluster (another installation, or the test suite's copies of a template) finds the
-- roles already there and grants on its own objects. Changing a function below later takes
-- a new migration (CREATE OR REPLACE, then the search_path and EXECUTE block again).

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['horae_api', 'horae_operator', 'horae_scheduler', 'horae_worker'] LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r);
        BEGIN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL;  -- created meanwhile by a migration of another database of the cluster
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'role % does not exist, and % may not create it', r, current_user
                    USING HINT = 'once per PostgreSQL cluster, as a role with CREATEROLE: '
                        'CREATE ROLE horae_api NOLOGIN; CREATE ROLE horae_operator NOLOGIN; '
                        'CREATE ROLE horae_scheduler NOLOGIN; CREATE ROLE horae_worker NOLOGIN;'
                        ' then run horae migrate again';
        END;
    END LOOP;
END $$;

-- The job API: jobs and their executions, tenants' limits (PUT /tenants/{name}).
GRANT SELECT, INSERT ON jobs, executions TO horae_api;
GRANT UPDATE (task, payload, run_at, cron, time_zone, jitter_seconds, retry_policy,
              timeout_seconds, concurrency_policy, starting_deadline_seconds, catch_up,
              spec_version, state, next_run_at, paused_at, updated_at) ON jobs TO horae_api;
GRANT UPDATE (status, finished_at, error_kind, error_message, cancel_requested)
    ON executions TO horae_api;
GRANT SELECT, INSERT, UPDATE (max_running) ON tenants TO horae_api;
GRANT SELECT ON installation TO horae_api;

-- The operator: ScheduledJobs' jobs, as the API writes them, but no tenants.
GRANT SELECT, INSERT ON jobs, executions TO horae_operator;
GRANT UPDATE (task, payload, run_at, cron, time_zone, jitter_seconds, retry_policy,
              timeout_seconds, concurrency_policy, starting_deadline_seconds, catch_up,
              spec_version, state, next_run_at, paused_at, updated_at) ON jobs TO horae_operator;
GRANT UPDATE (status, finished_at, error_kind, error_message, cancel_requested)
    ON executions TO horae_operator;
GRANT SELECT ON installation TO horae_operator;

-- The scheduler: preload, fenced dispatch, the reaper, next occurrences, jobs' latest runs,
-- and the daily partitions (through the two functions, which it may not write itself).
GRANT SELECT, INSERT ON executions TO horae_scheduler;
GRANT UPDATE (status, enqueued_at, dispatch_epoch, finished_at, error_kind, error_message,
              cancel_requested, lease_until) ON executions TO horae_scheduler;
GRANT SELECT ON jobs TO horae_scheduler;
GRANT UPDATE (next_run_at, last_run_at, last_status, state, updated_at) ON jobs TO horae_scheduler;
GRANT SELECT, INSERT, UPDATE (epoch, owner, taken_at) ON shard_epochs TO horae_scheduler;
GRANT SELECT ON installation TO horae_scheduler;

-- A worker's claim of the executions it names (one message's batch): within the rows'
-- tenants' limits (a limited tenant's claims are serialised by an advisory lock, its running
-- rows counted; those beyond the limit go back to `scheduled`, due again 1-1.5 throttle
-- delays later, not an attempt); then `queued|scheduled -> running` with a lease, only while
-- the job is active at the same spec version; the stale ones become `cancelled`. One answer
-- row per claimed ('claimed', with what its handler needs) or throttled ('throttled', due_at
-- the new due time) execution; duplicates and stale ones are not answered. `unrecorded`: the
-- row was still `scheduled` (published, dispatch not recorded): the caller schedules the
-- next occurrence (horae_schedule_next), for which the job's schedule is answered too.
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
            SELECT t.name, t.max_running FROM tenants t
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

-- A claim found its execution still `scheduled` (the scheduler's record of the dispatch
-- may never come): insert the next occurrence of its cron job, computed by the worker, at
-- most one pending occurrence past the claimed one, and only for executions `p_owner`
-- runs. Returns how many were inserted.
CREATE FUNCTION horae_schedule_next(
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

-- Record the terminal outcomes of running executions `p_owner` still holds, their retries
-- (attempt + 1, due at `p_retry_ats`; NULL: none) and their jobs' latest runs (a one-off
-- that ended is completed; ScheduledJobs' operators are told). Rows are locked in id order,
-- as heartbeats lock them, then the jobs in id order. Returns the executions recorded.
CREATE FUNCTION horae_finish(
    p_ids uuid[], p_dues timestamptz[], p_statuses execution_status[], p_kinds text[],
    p_messages text[], p_results jsonb[], p_retry_ats timestamptz[], p_retry_ids uuid[],
    p_owner text, p_now timestamptz, p_notify_before timestamptz
) RETURNS SETOF uuid
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    RETURN QUERY
    WITH target AS (
        SELECT e.id, e.due_at, u.status, u.error_kind, u.error_message, u.result, u.retry_at,
               u.retry_id
        FROM executions e
        JOIN unnest(p_ids, p_dues, p_statuses, p_kinds, p_messages, p_results, p_retry_ats,
                    p_retry_ids)
             AS u(id, due_at, status, error_kind, error_message, result, retry_at, retry_id)
          ON e.id = u.id AND e.due_at = u.due_at
        WHERE e.status = 'running' AND e.lease_owner = p_owner
        ORDER BY e.id
        FOR UPDATE OF e
    ), finished AS (
        UPDATE executions e SET status = t.status, finished_at = p_now,
               error_kind = t.error_kind, error_message = t.error_message, result = t.result,
               lease_until = NULL
        FROM target t
        WHERE e.id = t.id AND e.due_at = t.due_at
        RETURNING e.id, e.job_id, e.tenant, e.task, e.shard, e.occurrence_at, e.attempt,
                  e.job_version, t.status, t.retry_at, t.retry_id
    ), retried AS (
        INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at,
                                attempt, job_version, status, created_at,
                                starting_deadline_seconds, concurrency_policy)
        SELECT f.retry_id, f.job_id, f.tenant, f.task, f.shard, f.retry_at, f.occurrence_at,
               f.attempt + 1, f.job_version, 'scheduled', p_now, j.starting_deadline_seconds,
               j.concurrency_policy
        FROM finished f JOIN jobs j ON j.id = f.job_id
        WHERE f.retry_at IS NOT NULL
        RETURNING executions.id, executions.shard, executions.due_at
    ), retry_notified AS (
        SELECT pg_notify('horae_shard_' || s.shard::text,
                         (extract(epoch FROM s.due_at) * 1000000)::bigint::text || ' '
                         || ('x' || left(replace(s.id::text, '-', ''), 12))::bit(48)::bigint::text)
        FROM (SELECT DISTINCT ON (r.shard) r.shard, r.due_at, r.id FROM retried r
              WHERE r.due_at < p_notify_before ORDER BY r.shard, r.due_at, r.id) s
    ), latest AS (  -- a job's last outcome in the batch, by execution id
        SELECT DISTINCT ON (f.job_id) f.job_id, f.status, f.retry_at IS NULL AS final
        FROM finished f ORDER BY f.job_id, f.id DESC
    ), locked AS (
        SELECT j.id, l.status, l.final FROM jobs j JOIN latest l ON j.id = l.job_id
        ORDER BY j.id
        FOR UPDATE OF j
    ), updated AS (
        UPDATE jobs j SET last_run_at = p_now, last_status = l.status, updated_at = p_now,
               state = CASE WHEN j.run_at IS NOT NULL AND j.state = 'active' AND l.final
                            THEN 'completed'::job_state ELSE j.state END,
               next_run_at = CASE WHEN j.run_at IS NOT NULL AND l.final THEN NULL
                                  ELSE j.next_run_at END
        FROM locked l
        WHERE j.id = l.id
        RETURNING j.id, j.source
    ), job_notified AS (  -- only ScheduledJobs': NOTIFY serialises committing transactions
        SELECT pg_notify('horae_job_events', u.id::text) FROM updated u WHERE u.source = 'crd'
    )
    SELECT f.id FROM finished f
    WHERE (SELECT count(*) FROM retry_notified) >= 0 AND (SELECT count(*) FROM job_notified) >= 0;
END $$;

-- Extend the leases of the executions `p_owner` still works on (locked in id order, as
-- outcomes are recorded; a row locked by another transaction is skipped, not waited for);
-- answer them, with whether each was marked for cancellation.
CREATE FUNCTION horae_heartbeat(p_owner text, p_now timestamptz, p_lease interval, p_ids uuid[])
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
    UPDATE executions e SET lease_until = p_now + p_lease
    FROM target t
    WHERE e.id = t.id AND e.due_at = t.due_at
    RETURNING e.id, e.cancel_requested;
END $$;

-- Shutdown: give `p_owner`'s unfinished executions among `p_ids` back, due now (not an
-- attempt), and tell their shards. Returns how many.
CREATE FUNCTION horae_release(p_owner text, p_ids uuid[], p_now timestamptz) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    shards smallint[];
BEGIN
    WITH released AS (
        UPDATE executions e SET status = 'scheduled', due_at = p_now, lease_owner = NULL,
               lease_until = NULL, started_at = NULL, enqueued_at = NULL, dispatch_epoch = NULL
        WHERE e.lease_owner = p_owner AND e.status = 'running' AND e.id = ANY (p_ids)
        RETURNING e.shard
    )
    SELECT coalesce(array_agg(r.shard), '{}') INTO shards FROM released r;
    PERFORM pg_notify('horae_shard_' || s.shard::text, 'released')
    FROM (SELECT DISTINCT x AS shard FROM unnest(shards) AS x ORDER BY 1) s;
    RETURN cardinality(shards);
END $$;

-- The daily partitions are DDL: the scheduler's maintenance creates and drops them through
-- these two functions, run as their owner.
ALTER FUNCTION horae_create_partition(date) SECURITY DEFINER;
ALTER FUNCTION horae_drop_partitions(date) SECURITY DEFINER;

-- Every function runs with this schema first and pg_temp last (a caller's temporary table
-- cannot stand in for one of ours), and only the roles named below may call it.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = (SELECT n.oid FROM pg_catalog.pg_namespace n
                                WHERE n.nspname = current_schema())
          AND p.proname LIKE 'horae\_%'
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END $$;

GRANT EXECUTE ON FUNCTION horae_create_partition(date), horae_drop_partitions(date)
    TO horae_scheduler;
GRANT EXECUTE ON FUNCTION
    horae_claim(uuid[], timestamptz[], text[], text[], text, timestamptz, interval, interval),
    horae_schedule_next(text, uuid[], timestamptz[], uuid[], timestamptz[], timestamptz[],
                        timestamptz, timestamptz),
    horae_finish(uuid[], timestamptz[], execution_status[], text[], text[], jsonb[],
                 timestamptz[], uuid[], text, timestamptz, timestamptz),
    horae_heartbeat(text, timestamptz, interval, uuid[]),
    horae_release(text, uuid[], timestamptz)
    TO horae_worker;

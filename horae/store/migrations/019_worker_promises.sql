-- Workers' promises: a worker killed (or frozen) holding executions it claimed ahead of their
-- due times leaves them to another worker within seconds of their due times, rather than
-- when their leases (30 s by default, counted from the due time) run out.
--
-- Every fraction of a second a worker promises, in each store group, to start every
-- execution it claimed ahead that falls due up to `alive_until` (a little ahead of now):
-- one row per worker, rewritten in place (horae_promise). The reaper gives back to
-- `scheduled`, as it was due (a microsecond later: a new key, as horae_release), an
-- execution claimed ahead and not recorded whose due time is past its worker's promise by
-- more than the worker's `grace` (horae_return_unpromised). The worker starts such an
-- execution only if a promise covering its due time was written within the grace of that
-- due time (its own record of what it wrote); else it first promises again and reads which
-- of them are still its own.
--
-- Why that never runs one execution twice: a promise locks its row, then reads the clock
-- (t); a return locks the rows of the workers whose executions it may give back (FOR SHARE),
-- then reads the clock (r), then returns those due before r - grace and after the promise
-- it now sees. The two are serialised on the worker's row. A return after the promise sees
-- alive_until >= due and leaves the execution. A return before it had r < t, so an
-- execution it gave back was due before r - grace < t - grace: the promise was not written
-- within the grace of that due time, and the worker reads the row before starting it.
--
-- A worker of an earlier release writes no promise: with no row, its claims are returned
-- only when their leases run out, as before. A worker starting up first returns what its
-- identity still holds claimed ahead (a previous process of the same pod, killed), since no
-- process of it can start those now (horae_forget_claims_ahead).

CREATE TABLE worker_promises (
    owner text PRIMARY KEY,
    alive_until timestamptz NOT NULL,
    grace interval NOT NULL,
    written_at timestamptz NOT NULL
) WITH (fillfactor = 50);

CREATE FUNCTION horae_promise(
    p_owner text, p_ahead interval, p_grace interval, p_ids uuid[], p_dues timestamptz[]
)
RETURNS TABLE (alive_until timestamptz, written_at timestamptz, mine uuid[])
LANGUAGE plpgsql SECURITY DEFINER AS $$
#variable_conflict use_column
DECLARE
    t timestamptz;
    until timestamptz;
    still uuid[];
BEGIN
    PERFORM 1 FROM worker_promises w WHERE w.owner = p_owner FOR UPDATE;
    t := clock_timestamp();  -- after the lock: a return holding it has read its clock before
    INSERT INTO worker_promises AS w (owner, alive_until, grace, written_at)
    VALUES (p_owner, t + p_ahead, p_grace, t)
    ON CONFLICT (owner) DO UPDATE
    SET alive_until = greatest(w.alive_until, excluded.alive_until), grace = excluded.grace,
        written_at = excluded.written_at
    RETURNING w.alive_until INTO until;
    -- Of p_ids at p_dues (claimed ahead by this worker), those it still holds: none of them
    -- can be given back from now on (their due times are covered), and a return before
    -- this promise has committed (it held the row). One given back has a new due time.
    SELECT coalesce(array_agg(e.id), '{}') INTO still FROM executions e
    JOIN unnest(p_ids, p_dues) AS u(id, due_at) ON e.id = u.id AND e.due_at = u.due_at
    WHERE e.lease_owner = p_owner AND e.status = 'running';
    RETURN QUERY SELECT until, t, still;
END $$;

CREATE FUNCTION horae_return_unpromised(p_shards smallint[], p_epochs bigint[], p_window interval)
RETURNS TABLE (shard smallint, returned integer)
LANGUAGE plpgsql SECURITY DEFINER AS $$
#variable_conflict use_column
DECLARE
    held smallint[];
    silent text[];
    moved smallint[];
    r timestamptz;
BEGIN
    -- Workers whose promise ran out more than their grace ago (and not long ago: older
    -- claims are the leases' to return), their rows locked against a new promise. Most
    -- of the time there are none, and nothing is locked.
    SELECT coalesce(array_agg(w.owner ORDER BY w.owner), '{}') INTO silent FROM (
        SELECT w.owner FROM worker_promises w
        WHERE w.alive_until < clock_timestamp() - w.grace
          AND w.alive_until > clock_timestamp() - p_window
        ORDER BY w.owner
        FOR SHARE OF w) w;
    IF cardinality(silent) = 0 THEN
        RETURN;
    END IF;
    SELECT coalesce(array_agg(s.shard ORDER BY s.shard), '{}') INTO held FROM (
        SELECT s.shard FROM shard_epochs s
        JOIN unnest(p_shards, p_epochs) AS u(shard, epoch)
          ON s.shard = u.shard AND s.epoch = u.epoch
        ORDER BY s.shard
        FOR SHARE OF s) s;
    r := clock_timestamp();  -- after the locks: a promise after this reads a later clock
    WITH target AS (
        SELECT e.id, e.due_at FROM executions e
        JOIN worker_promises w ON w.owner = e.lease_owner
        WHERE e.shard = ANY (held) AND e.status = 'running' AND e.started_at IS NULL
          AND NOT e.cancel_requested AND e.lease_owner = ANY (silent)
          AND e.due_at > w.alive_until AND e.due_at < r - w.grace
        ORDER BY e.id
        FOR UPDATE OF e SKIP LOCKED
    ), gone AS (
        UPDATE executions e
        SET status = 'scheduled', due_at = e.due_at + interval '1 microsecond',
            lease_owner = NULL, lease_until = NULL, enqueued_at = NULL, dispatch_epoch = NULL
        FROM target t
        WHERE e.id = t.id AND e.due_at = t.due_at
        RETURNING e.shard
    )
    SELECT coalesce(array_agg(g.shard), '{}') INTO moved FROM gone g;
    PERFORM pg_notify('horae_shard_' || x.s::text, 'returned')
    FROM (SELECT DISTINCT y AS s FROM unnest(moved) AS y ORDER BY 1) x;
    RETURN QUERY SELECT y, count(*)::integer FROM unnest(moved) AS y GROUP BY y ORDER BY y;
END $$;

CREATE FUNCTION horae_forget_claims_ahead(p_owner text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    shards smallint[];
BEGIN
    WITH gone AS (
        UPDATE executions e
        SET status = 'scheduled', due_at = e.due_at + interval '1 microsecond',
            lease_owner = NULL, lease_until = NULL, enqueued_at = NULL, dispatch_epoch = NULL
        WHERE e.lease_owner = p_owner AND e.status = 'running' AND e.started_at IS NULL
          AND NOT e.cancel_requested
        RETURNING e.shard
    )
    SELECT coalesce(array_agg(g.shard), '{}') INTO shards FROM gone g;
    PERFORM pg_notify('horae_shard_' || s.shard::text, 'returned')
    FROM (SELECT DISTINCT x AS shard FROM unnest(shards) AS x ORDER BY 1) s;
    RETURN cardinality(shards);
END $$;

-- SECURITY DEFINER functions resolve names in Horae's schema only, callable by the roles
-- named only, as migration 004 sets it.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'horae_promise(text, interval, interval, uuid[], timestamptz[])',
        'horae_return_unpromised(smallint[], bigint[], interval)',
        'horae_forget_claims_ahead(text)']::regprocedure[]
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END $$;
GRANT EXECUTE ON FUNCTION horae_promise(text, interval, interval, uuid[], timestamptz[])
    TO horae_worker;
GRANT EXECUTE ON FUNCTION horae_forget_claims_ahead(text) TO horae_worker;
GRANT EXECUTE ON FUNCTION horae_return_unpromised(smallint[], bigint[], interval)
    TO horae_scheduler;
GRANT SELECT ON worker_promises TO horae_scheduler, horae_api, horae_operator;

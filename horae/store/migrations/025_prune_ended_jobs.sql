-- Ended jobs go with their history. A one-off's row stayed after it completed, and a
-- cancelled job's after it was cancelled, for good: the executions' retention dropped their
-- runs, but at a billion one-offs a day the `jobs` table (and each of its indexes) grew by a
-- billion rows a day that nothing removed. The hourly maintenance now deletes, after the
-- partitions past retention, the rows of jobs that ended before the oldest execution kept
-- (`p_before`) and have no execution left anywhere, in batches of `p_limit` (one transaction
-- each), with their backfills; their events go with `horae_prune_history`, as a gone job's,
-- and so do workers' promises not written since `p_before` (below).
--
-- Not deleted: a ScheduledJob's completed one-off (its resource may still exist, and the
-- operator's resync would take a missing row for a resource never created; once the resource
-- is deleted the job is cancelled, and goes), and a job with a backfill still running.
--
-- Candidates are found through `jobs_tenant_created` (tenant, created_at, id), tenant by
-- tenant (a loose scan of its leading column): an ended job was created before it ended, so
-- only rows created before `p_before` are read, and nothing is added to the busy paths (no
-- new index that every completion would enter). A call goes on from where the one before
-- it stopped (`p_tenant`, `p_created`, `p_id`: the last row it deleted; NULLs: from the
-- start), so the live jobs among the old rows are read once a run, not once a batch. It
-- returns how many it deleted and that row, or NULLs once nothing is left. Each candidate is
-- locked (`SKIP LOCKED`: a row being changed is left for the next run) and read again once
-- locked.
--
-- Executions left: those due before `p_before` can only be in the default partition (the
-- daily ones are dropped), one look. A completed job has none due later: every attempt ran
-- before the last outcome (which wrote `updated_at`; a rerun makes the job active again),
-- and the hour of margin covers writers' clocks. A cancelled job may have cancelled runs
-- due in the future, in any kept partition: each is looked at (cancels are rare).
CREATE FUNCTION horae_prune_jobs(
    p_before timestamptz, p_limit integer, p_tenant text, p_created timestamptz, p_id uuid
) RETURNS TABLE (pruned integer, tenant text, created_at timestamptz, id uuid)
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    t text;
    n integer := 0;
    k integer;
    last_created timestamptz;
    last_id uuid;
BEGIN
    FOR t IN
        WITH RECURSIVE tenants(name) AS (
            (SELECT j.tenant FROM jobs j WHERE j.tenant >= coalesce(p_tenant, '')
             ORDER BY j.tenant LIMIT 1)
            UNION ALL
            SELECT (SELECT j.tenant FROM jobs j WHERE j.tenant > s.name
                    ORDER BY j.tenant LIMIT 1)
            FROM tenants s WHERE s.name IS NOT NULL
        )
        SELECT s.name FROM tenants s WHERE s.name IS NOT NULL
    LOOP
        WITH gone AS (
            DELETE FROM jobs j
            WHERE j.id IN (
                SELECT c.id FROM jobs c
                WHERE c.tenant = t AND c.created_at < p_before
                  AND c.updated_at < p_before - interval '1 hour'
                  AND (t IS DISTINCT FROM p_tenant OR (c.created_at, c.id) > (p_created, p_id))
                  AND (c.state = 'cancelled' OR (c.state = 'completed' AND c.source = 'api'))
                  AND NOT EXISTS (SELECT 1 FROM executions e
                                  WHERE e.job_id = c.id AND e.due_at < p_before)
                  AND (c.state = 'completed'
                       OR NOT EXISTS (SELECT 1 FROM executions e WHERE e.job_id = c.id))
                  AND NOT EXISTS (SELECT 1 FROM backfills b
                                  WHERE b.job_id = c.id AND b.state = 'running')
                ORDER BY c.created_at, c.id
                LIMIT p_limit - n
                FOR UPDATE SKIP LOCKED)
            RETURNING j.id, j.created_at
        ), backfills_gone AS (
            DELETE FROM backfills b USING gone g WHERE b.job_id = g.id
        )
        SELECT count(*) OVER (), g.created_at, g.id INTO k, last_created, last_id
        FROM gone g ORDER BY g.created_at DESC, g.id DESC LIMIT 1;
        n := n + coalesce(k, 0);
        IF n >= p_limit THEN
            RETURN QUERY SELECT n, t, last_created, last_id;
            RETURN;
        END IF;
    END LOOP;
    RETURN QUERY SELECT n, NULL::text, NULL::timestamptz, NULL::uuid;
END $$;

-- As in 001, and the ended runs due before `before` that wait in the default partition go
-- too: a run due on a day with no partition of its own (a one-off created up to its starting
-- deadline, at most a week, after its run_at, before yesterday) stays there, since only days
-- from yesterday on get partitions, and no partition drop ever reached it. Only ended ones:
-- a run still to start (or running) is never deleted, whatever its due time.
CREATE OR REPLACE FUNCTION horae_drop_partitions(before date) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    r record;
    n integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('horae_partitions'));
    FOR r IN
        SELECT c.relname FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'executions'::regclass AND c.relname ~ '^executions_[0-9]{8}$'
          AND to_date(substr(c.relname, 12), 'YYYYMMDD') + 1 <= before
    LOOP
        EXECUTE format('DROP TABLE %I', r.relname);
        n := n + 1;
    END LOOP;
    DELETE FROM executions_default d
    WHERE d.due_at < (before::timestamp AT TIME ZONE 'UTC')
      AND d.status NOT IN ('scheduled', 'queued', 'running');
    RETURN n;
END $$;

-- As in 013, and workers' promises (migration 019) not written since `p_before` go too: a
-- worker's row is written every fraction of a second while it lives, under its pod's name,
-- so every pod that ever ran left one (each rollout of a WorkerPool, a row per replica),
-- and the reaper reads them all at every sweep. One silent that long holds nothing: its
-- claims' leases ran out long ago. (A worker that promises again writes its row anew.)
CREATE OR REPLACE FUNCTION horae_prune_history(p_before timestamptz) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    epochs integer;
    events integer;
    promises integer;
BEGIN
    DELETE FROM shard_epoch_history h
    WHERE h.taken_at < p_before
      AND EXISTS (SELECT 1 FROM shard_epoch_history l
                  WHERE l.shard = h.shard AND l.epoch > h.epoch AND l.taken_at < p_before);
    GET DIAGNOSTICS epochs = ROW_COUNT;
    DELETE FROM job_events e
    WHERE e.at < p_before
      AND (EXISTS (SELECT 1 FROM job_events l
                   WHERE l.job_id = e.job_id AND l.at > e.at AND l.at < p_before)
           OR NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = e.job_id AND j.state <> 'cancelled'));
    GET DIAGNOSTICS events = ROW_COUNT;
    DELETE FROM worker_promises w WHERE w.alive_until < p_before;
    GET DIAGNOSTICS promises = ROW_COUNT;
    RETURN epochs + events + promises;
END $$;

-- As migration 004 sets every function: this schema first, pg_temp last (CREATE OR REPLACE
-- reset horae_prune_history's and horae_drop_partitions'; their EXECUTE grants are kept);
-- only the scheduler's role (its maintenance) may run them.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION horae_prune_jobs(timestamptz, integer, text, timestamptz, '
                   'uuid) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION horae_prune_history(timestamptz) SET search_path = %I, '
                   'pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION horae_drop_partitions(date) SET search_path = %I, '
                   'pg_temp', current_schema());
END $$;
REVOKE ALL ON FUNCTION horae_prune_jobs(timestamptz, integer, text, timestamptz, uuid)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION horae_prune_jobs(timestamptz, integer, text, timestamptz, uuid)
    TO horae_scheduler;

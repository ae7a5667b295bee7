-- A stopping worker's hand-back (horae_release) makes a row due a microsecond later than it
-- was, at least: a new (id, due_at). An execution claimed ahead and handed back before its
-- due time kept its old key, which the dispatcher that published it skips as published, so
-- it waited for the redelivery timeout (60 s by default) to go out again: a worker rolled
-- in the 2 s before a burst made its share of the burst a minute late. (One due already
-- becomes due now, as before.)

CREATE OR REPLACE FUNCTION horae_release(p_owner text, p_ids uuid[], p_now timestamptz) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    shards smallint[];
BEGIN
    WITH released AS (
        UPDATE executions e
        SET status = 'scheduled', due_at = greatest(e.due_at + interval '1 microsecond', p_now),
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
BEGIN
    EXECUTE format('ALTER FUNCTION horae_release(text, uuid[], timestamptz)'
                   ' SET search_path = %I, pg_temp', current_schema());
    REVOKE ALL ON FUNCTION horae_release(text, uuid[], timestamptz) FROM PUBLIC;
END $$;

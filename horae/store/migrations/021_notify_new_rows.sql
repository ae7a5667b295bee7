-- One spelling of the shard NOTIFY that tells the schedulers of new executions (what
-- horae/store/dispatch.py `parse_notify` reads), for the statements that insert them: per
-- shard of the rows given, "<due, epoch microseconds> <creation millisecond> <creation
-- millisecond>", the shard's smallest new (due_at, id) as its due time and its id's creation
-- millisecond, then the smallest creation millisecond of all the shard's new ids (a re-read
-- behind the scheduler's cursor skips rows made before it). Never an id itself: any role may
-- LISTEN (migration 004). How many shards were told.
CREATE FUNCTION horae_notify_new(p_ids uuid[], p_shards smallint[], p_dues timestamptz[])
RETURNS bigint
LANGUAGE sql AS $$
    WITH notified AS (
        SELECT pg_notify('horae_shard_' || s.shard::text,
                         (extract(epoch FROM s.due_at) * 1000000)::bigint::text || ' '
                         || s.made::text || ' ' || s.first::text)
        FROM (SELECT DISTINCT ON (n.shard) n.shard, n.due_at, n.made,
                     min(n.made) OVER (PARTITION BY n.shard) AS first
              FROM (SELECT u.shard, u.due_at, u.id,
                           ('x' || left(replace(u.id::text, '-', ''), 12))::bit(48)::bigint AS made
                    FROM unnest(p_ids, p_shards, p_dues) AS u(id, shard, due_at)) n
              ORDER BY n.shard, n.due_at, n.id) s
    )
    SELECT count(*) FROM notified
$$;
REVOKE ALL ON FUNCTION horae_notify_new(uuid[], smallint[], timestamptz[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION horae_notify_new(uuid[], smallint[], timestamptz[])
    TO horae_api, horae_operator, horae_scheduler, horae_worker;

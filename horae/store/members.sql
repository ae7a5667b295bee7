-- name: take_member_lock
-- Take this scheduler replica's session lock (one per identity), if free: held until the
-- session ends, so a replica whose process dies (its socket closed) lets go of it at once.
SELECT pg_try_advisory_lock(hashtext('horae-scheduler-member'), hashtext($1))

-- name: member_locks_held
-- Which of these replicas hold their session lock in this database right now.
SELECT m.identity FROM unnest($1::text[]) AS m(identity)
WHERE EXISTS (
    SELECT 1 FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid = hashtext('horae-scheduler-member')::oid
      AND l.objid = hashtext(m.identity)::oid)
ORDER BY m.identity

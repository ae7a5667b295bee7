-- name: fence_shards_out
-- Moving shards $1 out of this group: their epochs bumped (a dispatch still holding the old
-- one is fenced out, taking them is refused here) and marked moved out, which also stops
-- creates here (horae_shards_moved_out); the rows stay locked for the mover's transaction.
INSERT INTO shard_epochs AS s (shard, epoch, owner, taken_at, moved_out)
SELECT x, 1, $2, $3, true FROM unnest($1::smallint[]) AS x ORDER BY x
ON CONFLICT (shard) DO UPDATE SET epoch = s.epoch + 1, owner = $2, taken_at = $3, moved_out = true

-- name: moved_out_shards
-- The shards marked moved out of this group.
SELECT shard FROM shard_epochs WHERE moved_out ORDER BY shard

-- name: unfence_shards
-- Shards $1 live here after all (a move that failed before the catalog switched): they may
-- be taken and get jobs here again.
UPDATE shard_epochs SET moved_out = false WHERE shard = ANY($1::smallint[]) AND moved_out

-- name: move_lock_timeout
-- For the rest of the mover's transaction: wait at most $1 ms for a lock.
SELECT set_config('lock_timeout', $1, true)

-- name: moving_jobs
-- The jobs of shards $1, locked until the move commits or fails.
SELECT * FROM jobs WHERE shard = ANY($1::smallint[]) ORDER BY id FOR UPDATE

-- name: moving_executions
-- The live executions (not yet ended) of shards $1, locked in id order as every batched
-- writer locks them, until the move commits or fails.
SELECT * FROM executions
WHERE shard = ANY($1::smallint[]) AND status IN ('scheduled', 'queued', 'running')
ORDER BY id FOR UPDATE

-- name: clear_live_executions
-- The live executions of shards $1 (after a move out; before a move in, those a failed
-- move left behind).
DELETE FROM executions
WHERE shard = ANY($1::smallint[]) AND status IN ('scheduled', 'queued', 'running')

-- name: clear_jobs
-- The jobs of shards $1 (after a move out; before a move in, those a failed move left).
DELETE FROM jobs WHERE shard = ANY($1::smallint[])

-- name: lengthen_moved_leases
-- The running executions just copied here (shards $1): their leases lengthened by $2, how
-- long the move has held them (their heartbeats skipped the rows it held).
UPDATE executions SET lease_until = lease_until + $2::interval
WHERE shard = ANY($1::smallint[]) AND status = 'running' AND lease_until IS NOT NULL

-- name: fence_shards_in
-- Shards $1 now live in this group: a new epoch (whoever takes them here starts afresh),
-- not moved out.
INSERT INTO shard_epochs AS s (shard, epoch, owner, taken_at, moved_out)
SELECT x, 1, $2, $3, false FROM unnest($1::smallint[]) AS x ORDER BY x
ON CONFLICT (shard) DO UPDATE SET epoch = s.epoch + 1, owner = $2, taken_at = $3, moved_out = false

-- name: announce_shards
-- Tell the schedulers of shards $1 to re-read their windows (delivered at COMMIT).
SELECT pg_notify('horae_shard_' || x::text, 'moved') FROM unnest($1::smallint[]) AS x

-- name: group_rows
-- A group's rows, for `horae store status`: jobs, live executions and all executions of the
-- shards it holds ($1), estimated for the history.
SELECT
    (SELECT count(*) FROM jobs WHERE shard = ANY($1::smallint[])) AS jobs,
    (SELECT count(*) FROM executions WHERE shard = ANY($1::smallint[])
       AND status IN ('scheduled', 'queued', 'running')) AS live,
    (SELECT coalesce(sum(c.reltuples), 0)::bigint FROM pg_inherits i
       JOIN pg_class c ON c.oid = i.inhrelid
       WHERE i.inhparent = 'executions'::regclass AND c.reltuples > 0) AS executions_estimate,
    (SELECT min(due_at) FROM executions WHERE shard = ANY($1::smallint[])
       AND status = 'scheduled' AND due_at <= now()) AS oldest_due,
    pg_database_size(current_database()) AS bytes

-- name: lock_allowances_session
-- Keep the allowance rebalancer out for the mover's session (its pass takes the same lock
-- for its transaction, and skips a round when it cannot): a move carries allowances.
SELECT pg_advisory_lock(hashtext('horae_allowances'))

-- name: carry_allowances_in
-- Tenants $1 arrive here with $2 running executions each (a move): each allowance here
-- grows by as many (NULL is the whole limit already).
UPDATE tenants t SET allowance = t.allowance + u.n
FROM unnest($1::text[], $2::integer[]) AS u(name, n)
WHERE t.name = u.name AND t.allowance IS NOT NULL

-- name: carry_allowances_out
-- Tenants $1 left with $2 running executions each (a move, under their claim locks): each
-- allowance here shrinks by as many (NULL, the whole limit, becomes the limit less them).
UPDATE tenants t SET allowance = greatest(0, coalesce(t.allowance, t.max_running) - u.n)
FROM unnest($1::text[], $2::integer[]) AS u(name, n)
WHERE t.name = u.name AND t.max_running IS NOT NULL

-- name: forget_tenant_use
-- The tenants' use bounds here (a move brought jobs in): the next quota checks count.
DELETE FROM tenant_use

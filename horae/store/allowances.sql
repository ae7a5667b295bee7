-- name: allowances_lock
-- Only one allowance rebalancer at a time (held for the caller's transaction in the first
-- group); false when another holds it.
SELECT pg_try_advisory_xact_lock(hashtext('horae_allowances'))

-- name: limited_tenants
-- Every tenant with a max_running in this group, with its allowance here (NULL: the whole limit).
SELECT name, max_running, allowance FROM tenants WHERE max_running IS NOT NULL ORDER BY name

-- name: copy_limit
-- A tenant's max_running as the first group has it ($1 name, $2 limit): a new row starts
-- with no allowance here (0), raised within the limit by the rebalancer.
INSERT INTO tenants AS t (name, max_running, allowance) VALUES ($1, $2, 0)
ON CONFLICT (name) DO UPDATE SET max_running = $2 WHERE t.max_running IS DISTINCT FROM $2

-- name: unlimit_tenants
-- Tenants $1 lost their limit in the first group: unlimited here too.
UPDATE tenants SET max_running = NULL, allowance = NULL
WHERE name = ANY($1::text[]) AND (max_running IS NOT NULL OR allowance IS NOT NULL)

-- name: clear_stale_allowances
-- An allowance left on a tenant without a limit would apply again were a limit set: cleared.
UPDATE tenants SET allowance = NULL WHERE max_running IS NULL AND allowance IS NOT NULL

-- name: tenant_demand
-- Per tenant ($1 names, $2 caps): its running executions here, and its backlog here (queued,
-- or scheduled and due before $3), counted up to its cap.
SELECT t.name,
       (SELECT count(*) FROM executions e
        WHERE e.tenant = t.name AND e.status = 'running') AS running,
       (SELECT count(*) FROM (
            SELECT 1 FROM executions e
            WHERE e.tenant = t.name
              AND (e.status = 'queued' OR (e.status = 'scheduled' AND e.due_at < $3))
            LIMIT t.cap) AS b) AS backlog
FROM unnest($1::text[], $2::integer[]) AS t(name, cap)

-- name: lock_tenant
-- The tenant's claim lock (horae_claim takes the same), for the caller's transaction.
SELECT pg_advisory_xact_lock(hashtext('horae_tenant:' || $1))

-- name: lower_allowance
-- Lower tenant $1's allowance here to $2, but never below what runs here now (under the
-- tenant's claim lock, so no claim starts one more meanwhile); the allowance set.
UPDATE tenants SET allowance = greatest($2, (
    SELECT count(*) FROM executions e WHERE e.tenant = $1 AND e.status = 'running'))
WHERE name = $1
RETURNING allowance

-- name: raise_allowance
-- Raise tenant $1's allowance here to $2 (the rebalancer raises only within what is unallocated).
UPDATE tenants SET allowance = $2 WHERE name = $1

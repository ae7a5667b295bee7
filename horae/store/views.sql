-- name: view_ended_page
-- A namespace's ended executions after ($2, $3) in due order, at most $4, of statuses $5
-- (NULL: any ended one): through executions_tenant_ended.
SELECT * FROM executions
WHERE tenant = $1 AND status NOT IN ('scheduled', 'queued', 'running')
  AND (due_at, id) > ($2, $3)
  AND ($5::execution_status[] IS NULL OR status = ANY($5::execution_status[]))
ORDER BY due_at, id
LIMIT $4

-- name: view_all_ended_page
-- Every namespace's ended executions after ($1, $2, $3) in (namespace, due) order, at most
-- $4, of statuses $5 (NULL: any ended one): through executions_tenant_ended.
SELECT * FROM executions
WHERE status NOT IN ('scheduled', 'queued', 'running')
  AND (tenant, due_at, id) > ($1, $2, $3)
  AND ($5::execution_status[] IS NULL OR status = ANY($5::execution_status[]))
ORDER BY tenant, due_at, id
LIMIT $4

-- name: view_jobs_page
-- Executions of jobs $1 past `scheduled`, after ($2, $3, $4) in (namespace, due) order, at
-- most $5, of statuses $6 (NULL: any): per job, its first page of each ended status through
-- executions_job_status (a job is of one namespace, so within it the cursor is on (due_at,
-- id): none before its namespace, all after it) and its queued and running ones through
-- executions_job_live, merged.
SELECT * FROM (
    SELECT e.* FROM unnest($1::uuid[]) AS j(id)
    -- the job's namespace: its jobs row's, or, in a group its shard moved out of (which
    -- keeps only its ended executions), one of those rows' (in the index's order, so that
    -- no plan reads the job's rows to find one)
    CROSS JOIN LATERAL (SELECT coalesce(
        (SELECT tenant FROM jobs WHERE id = j.id),
        (SELECT x.tenant FROM executions x
         WHERE x.job_id = j.id AND x.status NOT IN ('queued', 'running')
         ORDER BY x.status, x.due_at DESC, x.id DESC LIMIT 1)) AS tenant) t
    CROSS JOIN unnest(enum_range(NULL::execution_status)) AS s(status)
    CROSS JOIN LATERAL (
        SELECT * FROM executions x
        WHERE x.job_id = j.id AND x.status = s.status
          AND x.status NOT IN ('scheduled', 'queued', 'running')
          AND (x.due_at, x.id)
              > (CASE WHEN t.tenant = $2::text THEN $3::timestamptz ELSE '-infinity' END,
                 CASE WHEN t.tenant = $2::text THEN $4::uuid
                      ELSE '00000000-0000-0000-0000-000000000000' END)
        ORDER BY x.due_at, x.id
        LIMIT $5) e
    WHERE t.tenant >= $2
      AND s.status NOT IN ('scheduled', 'queued', 'running')
      AND ($6::execution_status[] IS NULL OR s.status = ANY($6::execution_status[]))
    UNION ALL
    SELECT * FROM executions
    WHERE job_id = ANY($1::uuid[]) AND status IN ('queued', 'running')
      AND (tenant, due_at, id) > ($2, $3, $4)
      AND ($6::execution_status[] IS NULL OR status = ANY($6::execution_status[]))
) a
ORDER BY tenant, due_at, id
LIMIT $5

-- name: view_live
-- A namespace's queued and running executions (of jobs $2; NULL: of any): through its jobs
-- and executions_job_live.
SELECT e.* FROM jobs j JOIN executions e ON e.job_id = j.id
WHERE j.tenant = $1 AND ($2::uuid[] IS NULL OR j.id = ANY($2::uuid[]))
  AND e.status IN ('queued', 'running')

-- name: view_all_live
-- Every queued and running execution: through executions_queued and executions_running.
SELECT * FROM executions WHERE status IN ('queued', 'running')

-- name: view_by_id_range
-- A namespace's executions past `scheduled` whose ids lie from $2 to $3 (an execution's
-- name holds the first digits of its id): through the primary key.
SELECT * FROM executions
WHERE id BETWEEN $2 AND $3 AND tenant = $1 AND status <> 'scheduled'

-- name: view_by_ids
-- Executions $2 of namespace $1 as they are now.
SELECT * FROM executions WHERE id = ANY($2::uuid[]) AND tenant = $1

-- name: view_ended_since
-- A namespace's executions due from $2 that ended after $3: through executions_tenant_ended.
SELECT * FROM executions
WHERE tenant = $1 AND status NOT IN ('scheduled', 'queued', 'running')
  AND due_at >= $2 AND finished_at > $3

-- name: view_jobs_ended_since
-- Executions of jobs $2 (of namespace $1) due from $3 that ended after $4: through
-- executions_job_status, each ended status's rows due from $3.
SELECT * FROM executions
WHERE job_id = ANY($2::uuid[]) AND tenant = $1
  AND status = ANY('{succeeded, failed, timed_out, cancelled, skipped, dead}'::execution_status[])
  AND status NOT IN ('scheduled', 'queued', 'running')
  AND due_at >= $3 AND finished_at > $4

-- name: view_jobs_named
-- The ids of namespace $1's jobs named any of $2 (jobs_tenant_name).
SELECT id FROM jobs WHERE tenant = $1 AND name = ANY($2::text[])

-- name: view_all_jobs_named
-- The ids of the jobs of any namespace named any of $1.
SELECT id FROM jobs WHERE name = ANY($1::text[])

-- name: view_job_names
-- The names of jobs $1 (NULL for an unnamed API job).
SELECT id, name FROM jobs WHERE id = ANY($1::uuid[])

-- name: view_clock
-- The store's clock.
SELECT now()

-- Manual runs: an occurrence run by hand, outside the schedule (`POST /jobs/{id}:trigger`,
-- `horae jobs trigger`, a ScheduledJob's `horae.dev/trigger` annotation), says so on every
-- attempt of it; and a ScheduledJob's job records the last annotation value it ran, so a
-- value runs once however often the operator sees it (a restart, a re-apply).

ALTER TABLE executions ADD COLUMN manual boolean NOT NULL DEFAULT false;

ALTER TABLE jobs ADD COLUMN manual_trigger text CHECK (length(manual_trigger) <= 253);
GRANT UPDATE (manual_trigger) ON jobs TO horae_operator;

-- As in 004, and a retry of a manual occurrence is manual too.
CREATE OR REPLACE FUNCTION horae_finish(
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
                  e.job_version, e.manual, t.status, t.retry_at, t.retry_id
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

-- SECURITY DEFINER functions resolve names in Horae's schema only (CREATE OR REPLACE reset
-- horae_finish's setting), as migration 004 sets it; its EXECUTE grant is kept.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION horae_finish(uuid[], timestamptz[], execution_status[],'
                   ' text[], text[], jsonb[], timestamptz[], uuid[], text, timestamptz,'
                   ' timestamptz) SET search_path = %I, pg_temp', current_schema());
END $$;

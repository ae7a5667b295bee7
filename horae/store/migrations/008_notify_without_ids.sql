-- A shard's NOTIFY says only when its earliest new execution is due, no longer which one:
-- any role may LISTEN, and the id let a stolen worker credential claim another tenant's
-- execution before its own worker did (docs/security.md). The scheduler reads the shard
-- from that due time (horae.store.executions.parse_notify). Redefines the two worker
-- functions of migration 004 that announce new executions; grants are kept, and the
-- search_path is set again (CREATE OR REPLACE drops it).

CREATE OR REPLACE FUNCTION horae_schedule_next(
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
                         (extract(epoch FROM s.due_at) * 1000000)::bigint::text)
        FROM (SELECT DISTINCT ON (i.shard) i.shard, i.due_at, i.id FROM inserted i
              WHERE i.due_at < p_notify_before ORDER BY i.shard, i.due_at, i.id) s
    )
    SELECT count(*) INTO n FROM inserted
    WHERE (SELECT count(*) FROM next_runs) >= 0 AND (SELECT count(*) FROM notified) >= 0;
    RETURN n;
END $$;

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
                         (extract(epoch FROM s.due_at) * 1000000)::bigint::text)
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

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp',
                   'horae_schedule_next(text, uuid[], timestamptz[], uuid[], timestamptz[], '
                   'timestamptz[], timestamptz, timestamptz)', current_schema());
    EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp',
                   'horae_finish(uuid[], timestamptz[], execution_status[], text[], text[], '
                   'jsonb[], timestamptz[], uuid[], text, timestamptz, timestamptz)',
                   current_schema());
END $$;

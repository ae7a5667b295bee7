-- Results and failure policy: a job may pause itself after N consecutive failed runs
-- (`failurePolicy.pauseAfterConsecutiveFailures`), counting them as its runs end; a paused
-- job says why (the reason a user gave, or the failures that paused it).
--
-- horae_finish is replaced (as migration 008 left it) in one place only: its `latest`,
-- `locked`, `updated` and `job_notified` steps, which recorded the jobs' latest runs, are
-- now `horae_record_runs`, called once the executions are recorded, so that the worker's
-- outcomes and the reaper's (`record_job_runs`) count failures and pause jobs alike.

ALTER TABLE jobs
    ADD COLUMN pause_after_failures integer
        CHECK (pause_after_failures IS NULL OR pause_after_failures BETWEEN 1 AND 1000),
    ADD COLUMN consecutive_failures integer NOT NULL DEFAULT 0
        CHECK (consecutive_failures >= 0),
    ADD COLUMN paused_reason text CHECK (length(paused_reason) <= 1024),
    ADD COLUMN paused_for_failures boolean NOT NULL DEFAULT false;

GRANT UPDATE (pause_after_failures, consecutive_failures, paused_reason, paused_for_failures)
    ON jobs TO horae_api, horae_operator;

-- Record jobs' latest runs: per job, its last outcome among these (the last by position),
-- and whether it was final (no retry follows). A final failure (failed, timed_out, dead)
-- adds one to the job's consecutive failures, a final success resets them; a retried
-- attempt and a cancellation leave them as they are. An active recurring job that reaches
-- its `pause_after_failures` is paused, with the reason, and its pending executions are
-- cancelled (as a pause by hand cancels them). A one-off that ended is completed.
-- ScheduledJobs' operators are told. Jobs are locked in id order.
CREATE FUNCTION horae_record_runs(
    p_job_ids uuid[], p_statuses execution_status[], p_finals boolean[],
    p_execution_ids uuid[], p_messages text[], p_now timestamptz
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    n bigint;
BEGIN
    WITH runs AS (
        SELECT u.*,
               count(*) FILTER (WHERE u.final AND u.status IN ('failed', 'timed_out', 'dead'))
                   OVER (PARTITION BY u.job_id) AS failures
        FROM unnest(p_job_ids, p_statuses, p_finals, p_execution_ids, p_messages)
             WITH ORDINALITY AS u(job_id, status, final, execution_id, message, n)
    ), latest AS (
        SELECT DISTINCT ON (r.job_id) r.* FROM runs r ORDER BY r.job_id, r.n DESC
    ), locked AS (
        SELECT j.id, j.state, j.run_at, j.pause_after_failures, l.status, l.final,
               l.execution_id, l.message,
               CASE WHEN l.final AND l.status = 'succeeded' THEN 0
                    ELSE j.consecutive_failures + l.failures::integer END AS streak
        FROM jobs j JOIN latest l ON j.id = l.job_id
        ORDER BY j.id
        FOR UPDATE OF j
    ), decided AS (
        SELECT l.*,
               (l.state = 'active' AND l.run_at IS NULL AND l.pause_after_failures IS NOT NULL
                AND l.streak >= l.pause_after_failures) AS tripped
        FROM locked l
    ), updated AS (
        UPDATE jobs j SET last_run_at = p_now, last_status = d.status, updated_at = p_now,
               consecutive_failures = d.streak,
               state = CASE WHEN j.run_at IS NOT NULL AND j.state = 'active' AND d.final
                            THEN 'completed'::job_state
                            WHEN d.tripped THEN 'paused'::job_state
                            ELSE j.state END,
               next_run_at = CASE WHEN (j.run_at IS NOT NULL AND d.final) OR d.tripped THEN NULL
                                  ELSE j.next_run_at END,
               paused_at = CASE WHEN d.tripped THEN p_now ELSE j.paused_at END,
               paused_for_failures = j.paused_for_failures OR d.tripped,
               paused_reason = CASE WHEN d.tripped THEN left(format(
                   'paused after %s consecutive failures (last: execution %s %s: %s)',
                   d.streak, d.execution_id, d.status, coalesce(d.message, 'no message')), 1024)
                   ELSE j.paused_reason END
        FROM decided d
        WHERE j.id = d.id
        RETURNING j.id, j.source, d.tripped
    ), cancelled AS (
        UPDATE executions e SET status = 'cancelled', finished_at = p_now, error_kind = 'paused',
               error_message = 'job paused after consecutive failures'
        FROM updated u
        WHERE u.tripped AND e.job_id = u.id AND e.status = 'scheduled'
        RETURNING e.id
    )
    -- only ScheduledJobs' are notified: NOTIFY serialises committing transactions
    SELECT count(*) INTO n
    FROM (SELECT pg_notify('horae_job_events', u.id::text) FROM updated u
          WHERE u.source = 'crd') notified
    WHERE (SELECT count(*) FROM cancelled) >= 0;
END $$;

-- As in 008, except that the jobs' latest runs are recorded by horae_record_runs.
CREATE OR REPLACE FUNCTION horae_finish(
    p_ids uuid[], p_dues timestamptz[], p_statuses execution_status[], p_kinds text[],
    p_messages text[], p_results jsonb[], p_retry_ats timestamptz[], p_retry_ids uuid[],
    p_owner text, p_now timestamptz, p_notify_before timestamptz
) RETURNS SETOF uuid
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    done_ids uuid[];
    done_jobs uuid[];
    done_statuses execution_status[];
    done_finals boolean[];
    done_messages text[];
BEGIN
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
                  e.job_version, e.manual, t.status, t.error_message, t.retry_at, t.retry_id
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
    )
    SELECT coalesce(array_agg(f.id ORDER BY f.id), '{}'),
           coalesce(array_agg(f.job_id ORDER BY f.id), '{}'),
           coalesce(array_agg(f.status ORDER BY f.id), '{}'),
           coalesce(array_agg(f.retry_at IS NULL ORDER BY f.id), '{}'),
           coalesce(array_agg(f.error_message ORDER BY f.id), '{}')
    INTO done_ids, done_jobs, done_statuses, done_finals, done_messages
    FROM finished f
    WHERE (SELECT count(*) FROM retry_notified) >= 0;
    -- a job's last outcome in the batch is its last by execution id, as before
    PERFORM horae_record_runs(done_jobs, done_statuses, done_finals, done_ids, done_messages,
                              p_now);
    RETURN QUERY SELECT unnest(done_ids);
END $$;

-- SECURITY DEFINER functions resolve names in Horae's schema only (CREATE OR REPLACE reset
-- horae_finish's setting), as migration 004 sets it; horae_finish's EXECUTE grant is kept.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION horae_finish(uuid[], timestamptz[], execution_status[],'
                   ' text[], text[], jsonb[], timestamptz[], uuid[], text, timestamptz,'
                   ' timestamptz) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION horae_record_runs(uuid[], execution_status[], boolean[],'
                   ' uuid[], text[], timestamptz) SET search_path = %I, pg_temp',
                   current_schema());
END $$;

REVOKE ALL ON FUNCTION
    horae_record_runs(uuid[], execution_status[], boolean[], uuid[], text[], timestamptz)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    horae_record_runs(uuid[], execution_status[], boolean[], uuid[], text[], timestamptz)
    TO horae_scheduler;

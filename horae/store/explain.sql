-- name: occurrence_rows
-- Every execution of one occurrence of a job (attempts, a cancelled one, a manual run at that
-- instant): first attempts through executions_occurrence, the others through
-- executions_occurrence_rest (an execution is never due before its occurrence).
(SELECT * FROM executions
 WHERE job_id = $1 AND occurrence_at = $2 AND due_at >= $2 - interval '1 day'
   AND attempt = 1 AND status <> 'cancelled')
UNION ALL
(SELECT * FROM executions
 WHERE job_id = $1 AND occurrence_at = $2 AND due_at >= $2 - interval '1 day'
   AND (attempt > 1 OR status = 'cancelled'))
ORDER BY attempt, due_at, id

-- name: occurrence_before
-- A job's first attempt (not cancelled) of its latest occurrence before $2.
SELECT * FROM executions
WHERE job_id = $1 AND occurrence_at < $2 AND attempt = 1 AND status <> 'cancelled'
ORDER BY occurrence_at DESC
LIMIT 1

-- name: occurrence_after
-- A job's first attempt (not cancelled) of its earliest occurrence after $2.
SELECT * FROM executions
WHERE job_id = $1 AND occurrence_at > $2 AND due_at >= $2 - interval '1 day'
  AND attempt = 1 AND status <> 'cancelled'
ORDER BY occurrence_at
LIMIT 1

-- name: job_events
-- A job's latest $2 changes of state and spec (job_events), oldest first.
SELECT * FROM (
    SELECT at, seq, kind, state, prior_state, spec_version, prior_cron, prior_time_zone,
           prior_run_at
    FROM job_events WHERE job_id = $1
    ORDER BY at DESC, seq DESC
    LIMIT $2
) latest
ORDER BY at, seq

-- name: shard_epochs_around
-- The epochs of shard $1 that tell who held it from $2 to $3: the one in force at $2, those
-- taken up to $3 (at most 50), the epochs $4 and those before them, and the latest.
SELECT shard, epoch, owner, taken_at, moved_out FROM shard_epoch_history
WHERE shard = $1 AND epoch IN (
    (SELECT epoch FROM shard_epoch_history
     WHERE shard = $1 AND taken_at <= $2 ORDER BY epoch DESC LIMIT 1)
    UNION ALL
    (SELECT epoch FROM shard_epoch_history
     WHERE shard = $1 AND taken_at > $2 AND taken_at <= $3 ORDER BY epoch LIMIT 50)
    UNION ALL
    SELECT e + d FROM unnest($4::bigint[]) AS e, (VALUES (0), (-1)) AS v(d)
    UNION ALL
    SELECT max(epoch) FROM shard_epoch_history WHERE shard = $1)
ORDER BY epoch

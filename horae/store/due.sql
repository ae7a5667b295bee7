-- name: due_ahead
-- Pending executions of shards $3 due in [$1, $2), per tenant and $4-wide bin of due time
-- (its first and last due times, and how many): the operator's scale-ahead read, through
-- executions_pending (one range per shard).
SELECT tenant, min(due_at) AS first_due, max(due_at) AS last_due, count(*) AS due
FROM executions
WHERE shard = ANY($3::smallint[]) AND status = 'scheduled' AND due_at >= $1 AND due_at < $2
GROUP BY tenant, date_bin($4::interval, due_at, TIMESTAMPTZ '2000-01-01 00:00:00+00')

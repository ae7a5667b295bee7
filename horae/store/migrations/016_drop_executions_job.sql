-- Every version of every execution entered executions_job (job_id, due_at DESC): three
-- entries per execution, about 8 % of the WAL an execution writes (docs/performance.md).
-- A job's history is read through executions_job_status (rows past `running`, and
-- `scheduled` ones) and executions_job_live (`queued`, `running`) instead, one probe per
-- status merged in due order (horae/store/executions.sql, views.sql), and its newest
-- dispatched occurrence through executions_occurrence.
DROP INDEX executions_job;

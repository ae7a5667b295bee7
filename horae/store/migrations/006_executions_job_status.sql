-- `GET /jobs/{id}/executions?status=` read every execution of the job through
-- executions_job and filtered: a job with a long history made each call read it all.
-- This index finds one status's rows directly. It leaves out `queued` and `running`, so a
-- claim's transitions add no entry to it (a row enters it when inserted `scheduled` and
-- again when it ends); a job's few live rows are found through executions_job_live.
CREATE INDEX executions_job_status ON executions (job_id, status, due_at DESC, id DESC)
    WHERE status NOT IN ('queued', 'running');

-- Each dispatch round asks which of the jobs of its first attempts are active cron jobs, to
-- schedule their next occurrences (`recurring_jobs`). Through `jobs_pkey` that read fetched
-- every one of those jobs' rows, one-offs included, which never recur: about 1.6 ms a round
-- at 2,000 one-offs a second, 4 % of PostgreSQL's statement time (docs/performance.md).
-- Through this index it finds only the jobs that recur: a one-off is never in it (a one-off's
-- row enters no more indexes than before), and a cron job's only while active; the updates
-- of a run (next fire time, latest outcome) change neither column, so they stay HOT-able.
CREATE INDEX jobs_active_cron ON jobs (id) WHERE cron IS NOT NULL AND state = 'active';

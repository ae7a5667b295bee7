-- Per-tenant quotas an administrator sets (`PUT /tenants/{name}`, `horae tenants set`): how
-- many live jobs a tenant may have, and how many fires per minute they may add up to. NULL:
-- the installation's default (horae/store/quotas.py). A job's rate is stored with it
-- (`horae.schedule.fires_per_minute`), so a tenant's use is one sum over an index.
ALTER TABLE tenants
    ADD COLUMN max_jobs integer CHECK (max_jobs IS NULL OR max_jobs >= 1),
    ADD COLUMN max_fires_per_minute integer
        CHECK (max_fires_per_minute IS NULL OR max_fires_per_minute >= 1);

-- Jobs stored before this migration: a one-off counts 1, a cron job 0 until it is next
-- edited (its rate needs the cron parser, which SQL does not have).
ALTER TABLE jobs ADD COLUMN fires_per_minute double precision NOT NULL DEFAULT 0
    CHECK (fires_per_minute >= 0);
UPDATE jobs SET fires_per_minute = 1 WHERE run_at IS NOT NULL;

-- A tenant's live jobs (what the quotas count), their rates read from the index alone.
CREATE INDEX jobs_tenant_live ON jobs (tenant) INCLUDE (fires_per_minute)
    WHERE state IN ('active', 'paused');

-- The roles of migration 004: the quotas are an administrator's setting through the API;
-- every creator of jobs (API, operator) reads them and records each job's rate; the
-- scheduler reads tenants' `max_running` to hold back a limited tenant's executions.
GRANT UPDATE (max_jobs, max_fires_per_minute) ON tenants TO horae_api;
GRANT UPDATE (fires_per_minute) ON jobs TO horae_api, horae_operator;
GRANT SELECT (name, max_jobs, max_fires_per_minute) ON tenants TO horae_operator;
GRANT SELECT (name, max_running) ON tenants TO horae_scheduler;

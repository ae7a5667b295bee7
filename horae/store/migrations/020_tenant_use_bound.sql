-- A bound on what each tenant's live jobs use in this store group, so that a quota check
-- does not count them all (15 ms at 100,000 live jobs, under the tenant's quota lock: every
-- create of that tenant waited for it). Never below the use: every write that adds a job or
-- a rate adds to it under the tenant's quota lock (horae/store/quotas.py), a move copying a
-- tenant's jobs in clears it; ends (completion, cancel) leave it high. A check that the bound
-- would fail counts exactly and sets the bound to the count. No row: count first.
CREATE TABLE tenant_use (
    tenant text PRIMARY KEY,
    jobs bigint NOT NULL CHECK (jobs >= 0),
    fires_per_minute double precision NOT NULL CHECK (fires_per_minute >= 0)
);

-- The roles of migration 004: every creator of jobs (API, operator) checks quotas.
GRANT SELECT, INSERT, UPDATE ON tenant_use TO horae_api, horae_operator;

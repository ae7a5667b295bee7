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

-- A create in one statement (no transaction around it) checks its tenants' bounds in that
-- statement, and calls this when one would fail a quota or is not kept yet: the statement
-- fails, nothing is written, and the create is made again in a transaction that counts.
CREATE FUNCTION horae_quota_recount(p_tenant text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'horae: quota use of tenant % to be counted', p_tenant;
END $$;
REVOKE ALL ON FUNCTION horae_quota_recount(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION horae_quota_recount(text) TO horae_api, horae_operator;

-- `kubectl get executions` reads the store (the aggregated API, horae/aggregated): a
-- namespace's executions in due order, paged. Only ended rows enter this index, so a claim's
-- transitions add nothing to it: a row gets one entry, when it ends (or is inserted ended,
-- as a skipped one is); a namespace's few live rows are found through its jobs and
-- executions_job_live. finished_at rides along so that a watch's "ended since" is read
-- from the index alone.
CREATE INDEX executions_tenant_ended ON executions (tenant, due_at, id) INCLUDE (finished_at)
    WHERE status NOT IN ('scheduled', 'queued', 'running');
-- `-l horae.dev/job=NAME`: a namespace's jobs of that name (a ScheduledJob deleted and
-- created again has two), whatever their source and state.
CREATE INDEX jobs_tenant_name ON jobs (tenant, name) WHERE name IS NOT NULL;

-- The aggregated API's role: it reads executions, their jobs' names and the catalog, and
-- writes nothing (docs/security.md).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'horae_viewer') THEN
        BEGIN
            CREATE ROLE horae_viewer NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL;  -- created meanwhile by a migration of another database of the cluster
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'role horae_viewer does not exist, and % may not create it',
                    current_user
                    USING HINT = 'once per PostgreSQL cluster, as a role with CREATEROLE: '
                        'CREATE ROLE horae_viewer NOLOGIN; then run horae migrate again';
        END;
    END IF;
END $$;
GRANT SELECT ON executions TO horae_viewer;
GRANT SELECT (id, tenant, name) ON jobs TO horae_viewer;
GRANT SELECT ON installation, store_groups, shard_placement, catalog_version TO horae_viewer;

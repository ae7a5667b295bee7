-- Horae's schema: jobs, time-indexed executions (daily partitions), shard
-- fencing epochs, tenants. Forward-only; later changes go in new files.

CREATE TYPE execution_status AS ENUM (
    'scheduled', 'queued', 'running',
    'succeeded', 'failed', 'timed_out', 'cancelled', 'skipped', 'dead'
);

CREATE TYPE job_state AS ENUM ('active', 'paused', 'cancelled', 'completed');

CREATE TABLE tenants (
    name          text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 253),
    max_running   integer CHECK (max_running IS NULL OR max_running >= 1),
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE jobs (
    id                         uuid PRIMARY KEY,
    tenant                     text NOT NULL,
    name                       text,
    source                     text NOT NULL CHECK (source IN ('crd', 'api')),
    task                       text NOT NULL,
    payload                    jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(payload) = 'object'),
    run_at                     timestamptz,
    cron                       text,
    time_zone                  text NOT NULL DEFAULT 'UTC',
    jitter_seconds             integer NOT NULL DEFAULT 0 CHECK (jitter_seconds >= 0),
    retry_policy               jsonb NOT NULL,
    timeout_seconds            integer CHECK (timeout_seconds IS NULL OR timeout_seconds >= 1),
    concurrency_policy         text NOT NULL DEFAULT 'Allow'
                               CHECK (concurrency_policy IN ('Allow', 'Forbid', 'Replace')),
    starting_deadline_seconds  integer CHECK (starting_deadline_seconds IS NULL OR starting_deadline_seconds >= 1),
    catch_up                   text NOT NULL DEFAULT 'Skip' CHECK (catch_up IN ('Skip', 'Latest')),
    state                      job_state NOT NULL DEFAULT 'active',
    paused_at                  timestamptz,
    spec_version               integer NOT NULL DEFAULT 1 CHECK (spec_version >= 1),
    shard                      smallint NOT NULL CHECK (shard >= 0),
    next_run_at                timestamptz,
    last_run_at                timestamptz,
    last_status                execution_status,
    idempotency_key            text,
    request_hash               text,
    created_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                 timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT jobs_one_schedule CHECK ((run_at IS NULL) <> (cron IS NULL)),
    CONSTRAINT jobs_crd_named CHECK (source <> 'crd' OR name IS NOT NULL)
);

-- A live CRD job is unique per namespace and name; a recreated resource gets a new job.
CREATE UNIQUE INDEX jobs_live_crd_name ON jobs (tenant, name)
    WHERE source = 'crd' AND state <> 'cancelled';
CREATE UNIQUE INDEX jobs_idempotency ON jobs (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_tenant_created ON jobs (tenant, created_at, id);

CREATE TABLE executions (
    id                uuid NOT NULL,
    job_id            uuid NOT NULL,
    tenant            text NOT NULL,
    task              text NOT NULL,
    shard             smallint NOT NULL CHECK (shard >= 0),
    due_at            timestamptz NOT NULL,
    occurrence_at     timestamptz NOT NULL,
    attempt           integer NOT NULL CHECK (attempt >= 1),
    job_version       integer NOT NULL,
    status            execution_status NOT NULL DEFAULT 'scheduled',
    cancel_requested  boolean NOT NULL DEFAULT false,
    -- Copied from the job (an edit replaces pending executions), so that the
    -- preload hot path reads executions alone, without a join.
    starting_deadline_seconds  integer,
    concurrency_policy         text NOT NULL DEFAULT 'Allow',
    lease_owner       text,
    lease_until       timestamptz,
    enqueued_at       timestamptz,
    dispatch_epoch    bigint,
    started_at        timestamptz,
    finished_at       timestamptz,
    error_kind        text,
    error_message     text,
    result            jsonb,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id, due_at, shard),
    CONSTRAINT executions_finished_iff_terminal CHECK (
        (status IN ('scheduled', 'queued', 'running')) = (finished_at IS NULL)
    ),
    CONSTRAINT executions_running_has_lease CHECK (
        status <> 'running' OR (lease_owner IS NOT NULL AND lease_until IS NOT NULL)
    )
) PARTITION BY RANGE (due_at);

-- The hot path: pending rows of a shard in due order. Holds only pending rows,
-- so reading "shard s, due before t" touches the next slice whatever the history.
CREATE INDEX executions_pending ON executions (shard, due_at, id) WHERE status = 'scheduled';
-- Each nominal occurrence of a job is scheduled at most once (retries excepted), so
-- scheduling the next occurrence twice (a duplicate dispatch) is harmless. A cancelled
-- one (job paused or edited) may be scheduled again.
CREATE UNIQUE INDEX executions_occurrence ON executions (job_id, occurrence_at, due_at, shard)
    WHERE attempt = 1 AND status <> 'cancelled';
CREATE INDEX executions_job ON executions (job_id, due_at DESC);
-- The reaper's paths: queued rows not claimed in time, running rows whose lease ran out.
CREATE INDEX executions_queued ON executions (shard, enqueued_at) WHERE status = 'queued';
CREATE INDEX executions_running ON executions (shard, lease_until) WHERE status = 'running';
-- Concurrency policies and heartbeats look at a job's (or a worker's) live executions.
CREATE INDEX executions_job_live ON executions (job_id) WHERE status IN ('queued', 'running');
CREATE INDEX executions_owner_running ON executions (lease_owner) WHERE status = 'running';
-- Tenant limits count a tenant's running executions at claim time.
CREATE INDEX executions_tenant_running ON executions (tenant) WHERE status = 'running';

-- Rows whose day has no partition yet (far-future one-offs) wait here; creating
-- that day's partition moves them over.
CREATE TABLE executions_default PARTITION OF executions DEFAULT;

CREATE TABLE shard_epochs (
    shard       smallint PRIMARY KEY CHECK (shard >= 0),
    epoch       bigint NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    owner       text,
    taken_at    timestamptz
);

-- Creates the daily partition of `day` (UTC), moving any rows for that day out
-- of the default partition first. Safe to call again.
CREATE FUNCTION horae_create_partition(day date) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    part text := format('executions_%s', to_char(day, 'YYYYMMDD'));
    lo timestamptz := (day::timestamp AT TIME ZONE 'UTC');
    hi timestamptz := ((day + 1)::timestamp AT TIME ZONE 'UTC');
BEGIN
    IF to_regclass(part) IS NOT NULL THEN
        RETURN false;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('horae_partitions'));
    -- A full statement (fresh snapshot) sees a partition another session just committed.
    PERFORM 1 FROM pg_catalog.pg_class WHERE relname = part
        AND relnamespace = (SELECT relnamespace FROM pg_catalog.pg_class WHERE oid = 'executions'::regclass);
    IF FOUND THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE executions INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
    EXECUTE format(
        'WITH moved AS (DELETE FROM executions_default WHERE due_at >= $1 AND due_at < $2 RETURNING *) '
        'INSERT INTO %I SELECT * FROM moved', part) USING lo, hi;
    EXECUTE format('ALTER TABLE executions ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', part, lo, hi);
    RETURN true;
END $$;

-- Drops daily partitions that end before `before` (UTC). Returns how many.
CREATE FUNCTION horae_drop_partitions(before date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('horae_partitions'));
    FOR r IN
        SELECT c.relname FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'executions'::regclass AND c.relname ~ '^executions_[0-9]{8}$'
          AND to_date(substr(c.relname, 12), 'YYYYMMDD') + 1 <= before
    LOOP
        EXECUTE format('DROP TABLE %I', r.relname);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

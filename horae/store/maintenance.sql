-- name: lock_migrations
-- Serialise concurrent `horae migrate` runs for the rest of the transaction.
SELECT pg_advisory_xact_lock($1)

-- name: create_migrations_table
-- The record of applied migrations.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    checksum    text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)

-- name: applied_migrations
-- Versions already applied, with their checksums.
SELECT version, checksum FROM schema_migrations ORDER BY version

-- name: record_migration
-- Remember one applied migration.
INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)

-- name: create_partition
-- Create the daily execution partition of a UTC day; true when it was created.
SELECT horae_create_partition($1::date)

-- name: drop_partitions
-- Drop the daily partitions that end on or before a UTC day; returns how many.
SELECT horae_drop_partitions($1::date)

-- name: prune_history
-- Drop the shard-owner and job-event history no kept execution needs (before $1); how many rows.
SELECT horae_prune_history($1)

-- name: prune_jobs
-- Delete up to $2 jobs that ended before $1 and have no execution left, going on after the
-- row ($3, $4, $5) the call before deleted last: how many, and the last row (NULLs: done).
SELECT * FROM horae_prune_jobs($1, $2, $3, $4, $5)

-- name: installation
-- The installation's settings (shards, retention); no row before the first `horae migrate`.
SELECT shards, retention_days FROM installation

-- name: init_installation
-- Record the installation's settings the first time; leaves an existing row alone.
INSERT INTO installation (shards, retention_days) VALUES ($1, $2)
ON CONFLICT (singleton) DO NOTHING

-- name: set_retention
-- Change the installation's retention (days of execution history kept).
UPDATE installation SET retention_days = $1, updated_at = now()

-- name: ping
-- A round trip that touches nothing: is the connection (or the pool) alive?
SELECT 1

-- name: database_now
-- PostgreSQL's wall clock at this instant (not the transaction's start), for DatabaseClock.
SELECT clock_timestamp()

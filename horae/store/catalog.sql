-- name: read_catalog
-- The catalog in one statement (one snapshot): its version, every group and where it is
-- (NULL: the catalog's own database), the group of every shard by shard number.
SELECT v.version,
       (SELECT json_object_agg(name, address) FROM store_groups) AS groups,
       (SELECT array_agg(group_name ORDER BY shard) FROM shard_placement) AS placement
FROM catalog_version v

-- name: catalog_version
-- The catalog's version alone: cheap enough to ask whenever a row seems to have moved.
SELECT version FROM catalog_version

-- name: init_catalog
-- The first group, `main`, is the catalog's own database and holds every shard; leaves a
-- catalog that exists alone. $1: the installation's shard count.
WITH main AS (
    INSERT INTO store_groups (name, address) VALUES ('main', NULL) ON CONFLICT DO NOTHING
), version AS (
    INSERT INTO catalog_version (version) VALUES (1) ON CONFLICT DO NOTHING
)
INSERT INTO shard_placement (shard, group_name)
SELECT s, 'main' FROM generate_series(0, $1 - 1) AS s
ON CONFLICT DO NOTHING

-- name: add_group
-- A new group; false when one of that name exists already.
INSERT INTO store_groups (name, address) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING true

-- name: place_shards
-- Shards $1 now live in group $2.
UPDATE shard_placement SET group_name = $2, placed_at = now() WHERE shard = ANY($1::smallint[])

-- name: bump_catalog
-- A new version of the catalog, announced to every component (delivered at COMMIT).
WITH bumped AS (UPDATE catalog_version SET version = version + 1 RETURNING version)
SELECT version, pg_notify('horae_catalog', version::text) FROM bumped

-- name: lock_catalog
-- Serialise changes of the catalog (adding groups, moving shards) for the transaction.
SELECT pg_advisory_xact_lock(hashtext('horae_catalog'))

-- name: lock_catalog_session
-- Serialise moves of shards for the session (a move commits in several steps); released
-- when the mover's connection ends, whatever happens to it.
SELECT pg_advisory_lock(hashtext('horae_catalog'))

-- The installation's own settings, one row: decided once by `horae migrate` and read by
-- every process from here, so no process can disagree with another (a CLI left at the
-- default 64 shards against a 16-shard installation, a migration hook dropping history at
-- its own default retention). `horae migrate` writes the row; nothing else does.
CREATE TABLE installation (
    singleton       boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    shards          smallint NOT NULL CHECK (shards BETWEEN 1 AND 4096),
    retention_days  integer NOT NULL CHECK (retention_days >= 1),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

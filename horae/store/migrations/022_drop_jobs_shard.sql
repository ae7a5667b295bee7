-- Every version of every job entered jobs_shard (shard): two entries per one-off job (its
-- insert, its completion, which cannot be HOT) and one per non-HOT update of a cron job's
-- row, about 4 % of the WAL an execution writes (docs/performance.md), for the statements of
-- a shard move and `horae store status` alone (horae/store/moves.sql), which now scan the
-- table: a shard's rows are spread over it (at 27 rows a page, one shard of 64 has a row in a
-- third of the pages), so the index saved them less than it cost every write.
DROP INDEX jobs_shard;

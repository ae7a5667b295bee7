-- A placeholder for helper backfill's migration 012 on this branch alone (migrations are
-- numbered without gaps); dropped when the branches merge.
SELECT 1;

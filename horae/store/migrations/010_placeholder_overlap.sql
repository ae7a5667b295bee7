-- A placeholder for helper overlap's migration 010 on this branch alone (migrations are
-- numbered without gaps); dropped when the branches merge.
SELECT 1;

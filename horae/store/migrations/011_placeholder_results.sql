-- A placeholder for helper results's migration 011 on this branch alone (migrations are
-- numbered without gaps); dropped when the branches merge.
SELECT 1;

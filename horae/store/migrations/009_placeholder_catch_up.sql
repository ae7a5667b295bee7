-- A placeholder for helper catch_up's migration 009 on this branch alone (migrations are
-- numbered without gaps); dropped when the branches merge.
SELECT 1;

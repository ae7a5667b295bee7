-- A claim writes a new version of the row (not HOT: it changes `status`), so every index on
-- `executions` costs each claim an entry. `executions_owner_running` served no query: the
-- heartbeat, the hand-back and the outcome's write find a worker's rows by id (the primary
-- key) and only then check `lease_owner`. (bench/explain_claim.py measures the claim.)
DROP INDEX IF EXISTS executions_owner_running;

-- What `horae explain` (GET /jobs/{id}/explain) reads beyond the executions themselves:
-- which replica held a shard under each fencing epoch (an execution records only the epoch
-- it was dispatched under, and `shard_epochs` only the current one), and when each job was
-- paused, resumed, cancelled or edited (a job row holds only its present state and spec).
--
-- Both are appended by triggers, in the statement that changes the row they follow: every
-- path that takes a shard (a scheduler's take, a move's fences) or changes a job's state or
-- spec (the API, the CLI, the operator, the scheduler) records it, and none can forget to.
-- Both are small: a shard is taken when a replica starts, stops or dies; a job changes state
-- when someone pauses, resumes, edits or cancels it (a one-off completing, the busy path, is
-- not recorded). The scheduler's maintenance prunes both with the executions' retention
-- (horae_prune_history).

CREATE TABLE shard_epoch_history (
    shard      smallint NOT NULL CHECK (shard >= 0),
    epoch      bigint NOT NULL CHECK (epoch >= 0),
    owner      text,
    taken_at   timestamptz,
    moved_out  boolean NOT NULL DEFAULT false,
    PRIMARY KEY (shard, epoch)
);

-- Each new epoch of a shard, as it is taken. (An epoch seen again, as after a restore of
-- `shard_epochs`, is overwritten: the table follows the epochs, it never refuses a take.)
CREATE FUNCTION horae_record_epoch() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    INSERT INTO shard_epoch_history AS h (shard, epoch, owner, taken_at, moved_out)
    VALUES (NEW.shard, NEW.epoch, NEW.owner, NEW.taken_at, NEW.moved_out)
    ON CONFLICT (shard, epoch) DO UPDATE
        SET owner = EXCLUDED.owner, taken_at = EXCLUDED.taken_at, moved_out = EXCLUDED.moved_out;
    RETURN NULL;
END $$;

CREATE TRIGGER shard_epochs_taken AFTER INSERT ON shard_epochs
    FOR EACH ROW EXECUTE FUNCTION horae_record_epoch();
CREATE TRIGGER shard_epochs_retaken AFTER UPDATE ON shard_epochs
    FOR EACH ROW WHEN (OLD.epoch IS DISTINCT FROM NEW.epoch)
    EXECUTE FUNCTION horae_record_epoch();

-- The epochs in force now: the history starts with them.
INSERT INTO shard_epoch_history (shard, epoch, owner, taken_at, moved_out)
SELECT shard, epoch, owner, taken_at, moved_out FROM shard_epochs;

-- A job's changes of state and spec: `kind` is edited (spec_version moved; the schedule it
-- replaced is kept, so the fire times before the edit can be told), paused, resumed or
-- cancelled; `state` and `prior_state` the job's state after and before. `at` is the
-- change's own time (the job's updated_at, which its writers pass in).
CREATE TABLE job_events (
    job_id           uuid NOT NULL,
    at               timestamptz NOT NULL,
    seq              bigint GENERATED ALWAYS AS IDENTITY,
    kind             text NOT NULL CHECK (kind IN ('edited', 'paused', 'resumed', 'cancelled')),
    state            job_state NOT NULL,
    prior_state      job_state NOT NULL,
    spec_version     integer NOT NULL,
    prior_cron       text,
    prior_time_zone  text,
    prior_run_at     timestamptz,
    PRIMARY KEY (job_id, at, seq)
);

CREATE FUNCTION horae_record_job_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    edited boolean := OLD.spec_version IS DISTINCT FROM NEW.spec_version;
BEGIN
    INSERT INTO job_events (job_id, at, kind, state, prior_state, spec_version, prior_cron,
                            prior_time_zone, prior_run_at)
    VALUES (
        NEW.id,
        CASE WHEN NEW.updated_at > OLD.updated_at THEN NEW.updated_at ELSE now() END,
        CASE WHEN edited THEN 'edited'
             WHEN NEW.state = 'paused' THEN 'paused'
             WHEN NEW.state = 'cancelled' THEN 'cancelled'
             ELSE 'resumed' END,
        NEW.state, OLD.state, NEW.spec_version,
        CASE WHEN edited THEN OLD.cron END,
        CASE WHEN edited THEN OLD.time_zone END,
        CASE WHEN edited THEN OLD.run_at END);
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_events AFTER UPDATE ON jobs
    FOR EACH ROW WHEN (
        OLD.spec_version IS DISTINCT FROM NEW.spec_version
        OR (OLD.state IS DISTINCT FROM NEW.state
            AND (OLD.state = 'paused' OR NEW.state IN ('paused', 'cancelled'))))
    EXECUTE FUNCTION horae_record_job_event();

-- An occurrence's rows, found by (job, occurrence): its first attempt through
-- executions_occurrence, and the rest (retries, cancelled ones) here. Only those rows have
-- an entry: a first attempt that is not cancelled, the hot path, adds none.
CREATE INDEX executions_occurrence_rest ON executions (job_id, occurrence_at)
    WHERE attempt > 1 OR status = 'cancelled';

-- Drop the history no kept execution needs: epochs that ended before `p_before` (the
-- oldest execution kept), and job events before it except each job's latest (its state
-- then), or all of them for a job cancelled or gone from this group. Returns how many.
CREATE FUNCTION horae_prune_history(p_before timestamptz) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    epochs integer;
    events integer;
BEGIN
    DELETE FROM shard_epoch_history h
    WHERE h.taken_at < p_before
      AND EXISTS (SELECT 1 FROM shard_epoch_history l
                  WHERE l.shard = h.shard AND l.epoch > h.epoch AND l.taken_at < p_before);
    GET DIAGNOSTICS epochs = ROW_COUNT;
    DELETE FROM job_events e
    WHERE e.at < p_before
      AND (EXISTS (SELECT 1 FROM job_events l
                   WHERE l.job_id = e.job_id AND l.at > e.at AND l.at < p_before)
           OR NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = e.job_id AND j.state <> 'cancelled'));
    GET DIAGNOSTICS events = ROW_COUNT;
    RETURN epochs + events;
END $$;

-- As migration 004 sets every function: this schema first, pg_temp last, no PUBLIC EXECUTE.
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'horae_record_epoch()', 'horae_record_job_event()', 'horae_prune_history(timestamptz)'
    ]
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END $$;

-- Explain is the API's (and the CLI's, which connects as an administrator or as the API);
-- the scheduler's maintenance prunes, through the function only.
GRANT SELECT ON shard_epoch_history, job_events TO horae_api;
GRANT EXECUTE ON FUNCTION horae_prune_history(timestamptz) TO horae_scheduler;

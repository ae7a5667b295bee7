"""Why an occurrence ran as it did, or has no row: `explanation.explain` over the rows the
store keeps, one case per reason."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from horae.models import (
    CatchUpPolicy,
    ConcurrencyPolicy,
    ExecutionStatus,
    JobSource,
    JobState,
)
from horae.store.explanation import (
    Epoch,
    Facts,
    Found,
    JobEvent,
    default_occurrence,
    explain,
    state_at,
)
from horae.store.rows import ExecutionRow, JobRow

CREATED = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
DUE = datetime(2026, 12, 2, 10, 0, 5, tzinfo=UTC)
"""An occurrence of `*/5 * * * * *`."""
S = timedelta(seconds=1)
MAIN = "main"


def job(**changes: Any) -> JobRow:
    fields: dict[str, Any] = dict(
        id=uuid.UUID(int=17),
        tenant="acme",
        name="report",
        source=JobSource.API,
        task="t",
        payload={},
        run_at=None,
        cron="*/5 * * * * *",
        time_zone="UTC",
        jitter_seconds=0,
        retry_policy={},
        timeout_seconds=None,
        concurrency_policy=ConcurrencyPolicy.ALLOW,
        starting_deadline_seconds=None,
        catch_up=CatchUpPolicy.SKIP,
        catch_up_window_seconds=None,
        state=JobState.ACTIVE,
        paused_at=None,
        spec_version=1,
        shard=17,
        next_run_at=None,
        last_run_at=None,
        last_status=None,
        idempotency_key=None,
        request_hash=None,
        created_at=CREATED,
        updated_at=CREATED,
        fires_per_minute=12.0,
        manual_trigger=None,
        pause_after_failures=None,
        consecutive_failures=0,
        paused_reason=None,
        paused_for_failures=False,
    )
    return JobRow(**{**fields, **changes})


def row(**changes: Any) -> ExecutionRow:
    fields: dict[str, Any] = dict(
        id=uuid.uuid4(),
        job_id=uuid.UUID(int=17),
        tenant="acme",
        task="t",
        shard=17,
        due_at=DUE,
        occurrence_at=DUE,
        attempt=1,
        job_version=1,
        status=ExecutionStatus.SUCCEEDED,
        cancel_requested=False,
        starting_deadline_seconds=None,
        concurrency_policy="Allow",
        lease_owner="worker-1",
        lease_until=None,
        enqueued_at=DUE + 0.01 * S,
        dispatch_epoch=4,
        started_at=DUE + 0.05 * S,
        finished_at=DUE + 0.3 * S,
        error_kind=None,
        error_message=None,
        result=None,
        created_at=DUE - 5 * S,
        manual=False,
    )
    return ExecutionRow(**{**fields, **changes})


A = Epoch(MAIN, 17, 4, "scheduler-a", CREATED)
B = Epoch(MAIN, 17, 5, "scheduler-b", DUE + 4 * S)


def facts(*rows: ExecutionRow, **changes: Any) -> Facts:
    fields: dict[str, Any] = dict(
        job=job(),
        group=MAIN,
        at=DUE,
        now=NOW,
        rows=[Found(MAIN, r) for r in rows],
        epochs=[A],
        history_from=NOW - timedelta(days=30),
    )
    return Facts(**{**fields, **changes})


def test_a_run_that_started_within_a_second_ran_on_time() -> None:
    found = explain(facts(row()))
    assert (found.outcome, found.reason, found.verdict) == ("ran_on_time", None, "ran on time")
    assert [s.what for s in found.steps] == ["due", "dispatched", "claimed", "succeeded"]
    assert found.steps[0].detail == (
        "on shard 17, owned by scheduler-a (epoch 4, since 2026-12-01 09:00:00.000Z)"
    )
    assert found.attempts[0].dispatched_by == "scheduler-a"
    assert found.late_seconds is not None and round(found.late_seconds, 2) == 0.05


def test_a_run_late_because_its_shard_changed_owner_names_both_replicas() -> None:
    late = row(
        dispatch_epoch=5,
        enqueued_at=DUE + 4.1 * S,
        started_at=DUE + 4.2 * S,
        finished_at=DUE + 4.5 * S,
        lease_owner="worker-2",
    )
    found = explain(facts(late, epochs=[A, B]))
    assert (found.outcome, found.reason) == ("ran_late", "shard_owner_changed")
    assert found.verdict == (
        "started 4.2 s late: shard 17 changed owner at 2026-12-02 10:00:09.000Z"
        " (replica scheduler-a → scheduler-b)"
    )
    change = found.owner_change
    assert change is not None
    assert (change.from_owner, change.from_epoch, change.to_owner, change.to_epoch) == (
        "scheduler-a",
        4,
        "scheduler-b",
        5,
    )
    assert [s.what for s in found.steps] == [
        "due",
        "shard taken",
        "dispatched",
        "claimed",
        "succeeded",
    ]
    assert found.attempts[0].dispatched_by == "scheduler-b"


def test_an_unclaimed_late_dispatch_is_judged_by_its_dispatch() -> None:
    queued = row(
        status=ExecutionStatus.QUEUED,
        dispatch_epoch=5,
        enqueued_at=DUE + 4.1 * S,
        started_at=None,
        finished_at=None,
        lease_owner=None,
    )
    found = explain(facts(queued, epochs=[A, B]))
    assert found.outcome == "in_progress"
    assert found.verdict.startswith("dispatched 4.1 s late: shard 17 changed owner at")
    assert found.verdict.endswith("; attempt 1 queued, not claimed yet")


def test_a_forbid_skip_says_why_and_which_replica_skipped_it() -> None:
    message = "concurrencyPolicy=Forbid: the previous occurrence is still running"
    skipped = row(
        status=ExecutionStatus.SKIPPED,
        error_kind="forbid",
        error_message=message,
        enqueued_at=None,
        dispatch_epoch=None,
        started_at=None,
        lease_owner=None,
        finished_at=DUE + 0.002 * S,
    )
    found = explain(facts(skipped))
    assert (found.outcome, found.reason) == ("skipped", "forbid")
    assert found.verdict == f"skipped: {message}"
    assert found.steps[-1].what == "skipped"
    assert found.steps[-1].detail == f"by scheduler-a (epoch 4): forbid: {message}"


def test_a_deadline_skip_after_an_owner_change_names_the_change() -> None:
    skipped = row(
        status=ExecutionStatus.SKIPPED,
        error_kind="deadline",
        error_message="not started within startingDeadlineSeconds=2 (4.1s late)",
        enqueued_at=None,
        dispatch_epoch=None,
        started_at=None,
        lease_owner=None,
        finished_at=DUE + 4.1 * S,
    )
    found = explain(facts(skipped, epochs=[A, B]))
    assert found.reason == "deadline"
    assert found.verdict.endswith("(replica scheduler-a → scheduler-b)")


def test_retries_show_each_attempt_and_the_final_outcome() -> None:
    first = row(status=ExecutionStatus.FAILED, error_kind="RetryableError", error_message="boom")
    second = row(
        attempt=2,
        due_at=DUE + 2 * S,
        created_at=DUE + 0.3 * S,
        started_at=DUE + 2.01 * S,
        finished_at=DUE + 2.1 * S,
    )
    assert explain(facts(first, second)).verdict == "started on time; succeeded on attempt 2"
    dead = row(
        attempt=2,
        due_at=DUE + 2 * S,
        status=ExecutionStatus.DEAD,
        error_kind="PermanentError",
        error_message="no such file",
    )
    found = explain(facts(first, dead))
    assert found.outcome == "failed"
    assert found.verdict == "started on time; dead after 2 attempt(s): PermanentError: no such file"
    assert [a.attempt for a in found.attempts] == [1, 2]
    assert "retry" in [s.what for s in found.steps]


def test_lateness_without_an_owner_change_has_its_own_cause() -> None:
    waited = row(started_at=DUE + 6 * S, finished_at=DUE + 7 * S)
    assert explain(facts(waited)).reason == "waited_for_worker"
    behind = row(enqueued_at=DUE + 3 * S, started_at=DUE + 3.1 * S)
    found = explain(facts(behind))
    assert found.reason == "dispatched_late"
    assert "scheduler-a dispatched it 3.0 s after it was due" in found.verdict
    moved = row(due_at=DUE + 8 * S, enqueued_at=DUE + 8 * S, started_at=DUE + 8.1 * S)
    assert explain(facts(moved)).reason == "due_time_moved"


def test_a_cancelled_occurrence_says_by_what() -> None:
    cancelled = row(
        status=ExecutionStatus.CANCELLED,
        error_kind="paused",
        error_message="job paused",
        enqueued_at=None,
        dispatch_epoch=None,
        started_at=None,
        lease_owner=None,
        finished_at=DUE - 2 * S,
    )
    found = explain(facts(cancelled))
    assert (found.outcome, found.verdict) == (
        "cancelled",
        "cancelled before it ran: paused: job paused",
    )


def test_a_pending_occurrence_is_not_due_yet_or_overdue() -> None:
    pending = row(
        status=ExecutionStatus.SCHEDULED,
        enqueued_at=None,
        dispatch_epoch=None,
        started_at=None,
        finished_at=None,
        lease_owner=None,
    )
    ahead = explain(facts(pending, now=DUE - 3 * S))
    assert ahead.outcome == "not_due_yet"
    assert ahead.verdict.startswith(
        "not due yet: due at 2026-12-02 10:00:05.000Z on shard 17, owned by scheduler-a"
    )
    assert explain(facts(pending, now=DUE + 0.5 * S)).outcome == "in_progress"
    overdue = explain(facts(pending, now=DUE + 30 * S))
    assert overdue.outcome == "overdue"
    assert overdue.verdict.startswith(
        "due 30.0 s ago and not claimed yet (published and waiting for a worker, or not"
    )


def test_a_manual_run_at_the_instant_is_explained_as_one() -> None:
    manual = row(manual=True, created_at=DUE)
    found = explain(facts(manual))
    assert (found.outcome, found.reason) == ("ran_on_time", "manual")
    assert found.verdict == "run by hand at 2026-12-02 10:00:05.000Z; ran on time"
    assert (found.steps[0].what, found.steps[0].detail[:18]) == ("triggered", "run by hand, on sh")
    slow = explain(facts(row(manual=True, created_at=DUE, started_at=DUE + 6 * S)))
    assert slow.verdict.startswith("run by hand at 2026-12-02 10:00:05.000Z; started 6.0 s late:")


BACKFILL = uuid.UUID(int=99)
FED = DUE + 86400 * S
"""When the backfill made its execution: a day after the occurrence."""


def test_a_backfilled_occurrence_is_backfilled_not_late() -> None:
    fed = row(
        backfill=BACKFILL,
        due_at=FED,
        created_at=FED,
        enqueued_at=FED + 0.01 * S,
        started_at=FED + 0.05 * S,
        finished_at=FED + 0.3 * S,
    )
    found = explain(facts(fed))
    assert (found.outcome, found.reason) == ("ran_on_time", "backfill")
    assert found.verdict == (
        f"backfilled by backfill {BACKFILL} at 2026-12-03 10:00:05.000Z; ran on time"
    )
    assert found.due_at == FED and found.late_seconds is not None and found.late_seconds < 1
    assert [s.what for s in found.steps] == ["backfilled", "dispatched", "claimed", "succeeded"]
    assert found.steps[0].at == FED
    assert found.steps[0].detail.startswith(
        f"by backfill {BACKFILL}: a past occurrence run now, due at 2026-12-03 10:00:05.000Z"
    )
    failed = replace(fed, status=ExecutionStatus.FAILED, error_kind="E", error_message="boom")
    assert explain(facts(failed)).verdict == (
        f"backfilled by backfill {BACKFILL} at 2026-12-03 10:00:05.000Z; started on time;"
        " failed after 1 attempt(s): E: boom"
    )
    cancelled = row(
        backfill=BACKFILL,
        due_at=FED,
        created_at=FED,
        status=ExecutionStatus.CANCELLED,
        error_kind="cancelled",
        error_message="backfill cancelled",
        enqueued_at=None,
        started_at=None,
        finished_at=FED + 2 * S,
    )
    assert explain(facts(cancelled)).verdict == (
        f"backfilled by backfill {BACKFILL} at 2026-12-03 10:00:05.000Z; cancelled before it"
        " ran: cancelled: backfill cancelled"
    )


def test_an_instant_that_is_no_fire_time_names_the_nearest() -> None:
    found = explain(facts(at=DUE + 2 * S))
    assert (found.outcome, found.occurrence_at) == ("not_a_fire_time", None)
    assert found.fire_time_before == DUE and found.fire_time_after == DUE + 5 * S
    assert found.verdict == (
        "no occurrence at 2026-12-02 10:00:07.000Z: not a fire time of */5 * * * * * (UTC);"
        " the nearest are 2026-12-02 10:00:05.000Z before and 2026-12-02 10:00:10.000Z after"
    )


def test_the_schedule_in_force_then_is_the_one_an_edit_replaced() -> None:
    edit = JobEvent(
        DUE + 60 * S,
        "edited",
        JobState.ACTIVE,
        JobState.ACTIVE,
        2,
        prior_cron="*/5 * * * * *",
        prior_time_zone="UTC",
    )
    edited = job(cron="0 * * * *", spec_version=2)
    found = explain(facts(job=edited, events=[edit]))
    assert found.outcome == "no_row"  # a fire time of the old schedule, not of the new
    later = explain(facts(job=edited, events=[edit], at=DUE + 120 * S))
    assert later.outcome == "not_a_fire_time"
    assert "0 * * * * (UTC)" in later.verdict


def test_an_occurrence_before_the_job_existed() -> None:
    found = explain(facts(job=job(created_at=DUE + 1 * S)))
    assert (found.outcome, found.reason) == ("no_row", "before_created")
    assert found.verdict == (
        "no row: the job did not exist yet at 2026-12-02 10:00:05.000Z"
        " (created at 2026-12-02 10:00:06.000Z)"
    )


def test_an_occurrence_after_the_job_was_cancelled() -> None:
    cancel = JobEvent(DUE - 60 * S, "cancelled", JobState.CANCELLED, JobState.ACTIVE, 1)
    found = explain(facts(job=job(state=JobState.CANCELLED), events=[cancel]))
    assert found.reason == "cancelled"
    assert "cancelled at 2026-12-02 09:59:05.000Z" in found.verdict


def test_an_occurrence_while_paused_says_when_it_was_paused_and_resumed() -> None:
    events = [
        JobEvent(DUE - 600 * S, "paused", JobState.PAUSED, JobState.ACTIVE, 1),
        JobEvent(DUE + 600 * S, "resumed", JobState.ACTIVE, JobState.PAUSED, 1),
    ]
    recorded = row(
        occurrence_at=DUE + 100 * S,
        due_at=DUE + 100 * S,
        status=ExecutionStatus.SKIPPED,
        error_kind="paused",
        error_message="job was paused at this time",
    )
    found = explain(facts(events=events, after=recorded))
    assert (found.outcome, found.reason) == ("no_row", "paused")
    assert found.verdict == (
        "no row: the job was paused at this time (paused at 2026-12-02 09:50:05.000Z, resumed"
        " at 2026-12-02 10:10:05.000Z); older than the newest 100 recorded for that gap"
    )
    still = explain(facts(events=events[:1]))
    assert still.verdict.endswith("not resumed since)")


def test_without_events_a_paused_job_is_paused_since_its_paused_at() -> None:
    paused = job(state=JobState.PAUSED, paused_at=DUE - 60 * S)
    assert state_at(facts(job=paused), DUE) == JobState.PAUSED
    assert state_at(facts(job=paused), DUE - 120 * S) == JobState.ACTIVE
    assert explain(facts(job=paused)).reason == "paused"


def test_a_missed_occurrence_older_than_the_recorded_ones_of_its_gap() -> None:
    oldest = row(
        occurrence_at=DUE + 500 * S,
        due_at=DUE + 500 * S,
        status=ExecutionStatus.SKIPPED,
        error_kind="catch_up",
        error_message="catch-up window 10m: outside the window",
    )
    found = explain(facts(after=oldest, before=row(occurrence_at=DUE - 5 * S)))
    assert (found.outcome, found.reason) == ("no_row", "catch_up_gap")
    assert found.verdict.startswith(
        "no row: missed while the scheduler was not dispatching, older than the newest 100"
        " recorded for that gap (from 2026-12-02 10:08:25.000Z: catch_up: catch-up window"
    )


def test_an_occurrence_past_retention() -> None:
    found = explain(facts(history_from=DUE + 3600 * S))
    assert found.reason == "retention"


def test_a_future_occurrence_names_its_due_time_and_shard_owner() -> None:
    found = explain(facts(at=NOW + 3600 * S))
    assert found.outcome == "not_due_yet"
    assert found.verdict == (
        "not due yet: will be due at 2026-12-02 13:00:00.000Z on shard 17, owned by scheduler-a"
        " (epoch 4, since 2026-12-01 09:00:00.000Z)"
    )
    paused = explain(facts(at=NOW + 3600 * S, job=job(state=JobState.PAUSED, paused_at=NOW)))
    assert paused.reason == "paused"


def test_no_reason_found_says_what_was_checked() -> None:
    found = explain(facts())
    assert (found.outcome, found.reason) == ("no_row", "unknown")
    assert found.checked[0] == "the job's executions with occurrence 2026-12-02 10:00:05.000Z: none"
    assert "the nearest executions: none before, none after" in found.checked


def test_the_default_occurrence_is_the_latest_at_or_before_now() -> None:
    assert default_occurrence(job(), [], None, NOW) == NOW
    assert default_occurrence(job(), [], None, NOW + 2 * S) == NOW
    young = job(created_at=NOW + 1 * S)
    assert default_occurrence(young, [], None, NOW + 2 * S) == NOW + 5 * S  # its first, ahead
    manual = row(occurrence_at=NOW + 1.5 * S, manual=True)
    assert default_occurrence(job(), [], manual, NOW + 2 * S) == NOW + 1.5 * S
    once = job(cron=None, run_at=NOW + 3600 * S)
    assert default_occurrence(once, [], None, NOW) == NOW + 3600 * S


def late_by(seconds: float, **changes: Any) -> ExecutionRow:
    """The occurrence at DUE, dispatched `seconds` after it was due."""
    fields: dict[str, Any] = dict(
        enqueued_at=DUE + seconds * S,
        started_at=DUE + (seconds + 0.05) * S,
        finished_at=DUE + (seconds + 0.3) * S,
    )
    return row(**{**fields, **changes})


OUTSIDE = "outside the catch-up window of 1m (1m2s late)"


def test_an_occurrence_replayed_by_catch_up_all_after_a_gap_says_so() -> None:
    every = job(catch_up=CatchUpPolicy.ALL, catch_up_window_seconds=60)
    skipped = row(
        occurrence_at=DUE - 5 * S,
        due_at=DUE - 5 * S,
        status=ExecutionStatus.SKIPPED,
        error_kind="catch_up",
        error_message=OUTSIDE,
    )
    # The gap's first replayed occurrence: made when catch-up judged the gap, 57 s after it
    # was due, with 10 later ones overdue then (to 50 s after it: the 5 s grace before).
    first = late_by(57.02, created_at=DUE + 57 * S)
    found = explain(facts(first, job=every, before=skipped))
    assert (found.outcome, found.reason) == ("ran_late", "catch_up_replay")
    assert found.verdict == (
        "started 57.1 s late, replayed by catch-up after a gap: the occurrence before,"
        f" 2026-12-02 10:00:00.000Z, was skipped ({OUTSIDE}); 10 later occurrence(s) were"
        " overdue too when it was dispatched at 2026-12-02 10:01:02.020Z; its row was made at"
        " 2026-12-02 10:01:02.000Z, 57.0 s after it was due, as catch-up went through the"
        " gap; catch-up policy All runs the missed occurrences of a gap due within its window"
        " of 1m"
    )
    # The gap's newest, replayed last: 8 s late, its row made as the one before ran.
    newest = late_by(8, created_at=DUE + 7.9 * S)
    before = late_by(12.9, occurrence_at=DUE - 5 * S, due_at=DUE - 5 * S)
    found = explain(facts(newest, job=every, before=before))
    assert found.reason == "catch_up_replay"
    assert found.verdict.startswith(
        "started 8.1 s late, replayed by catch-up after a gap: its row was made at"
        " 2026-12-02 10:00:12.900Z, 7.9 s after it was due"
    )
    # Replayed after a takeover: the new owner is named too.
    taken = late_by(57.02, created_at=DUE + 57 * S, dispatch_epoch=5)
    found = explain(facts(taken, job=every, before=skipped, epochs=[A, B]))
    assert found.reason == "catch_up_replay"
    assert found.verdict.endswith(
        "; shard 17 changed owner at 2026-12-02 10:00:09.000Z (replica scheduler-a → scheduler-b)"
    )
    assert found.owner_change is not None


def test_an_occurrence_replayed_by_catch_up_latest_names_the_skipped_one_before() -> None:
    latest = job(catch_up=CatchUpPolicy.LATEST)
    message = "catch-up policy Latest: only the latest missed occurrence runs"
    skipped = row(
        occurrence_at=DUE - 5 * S,
        due_at=DUE - 5 * S,
        status=ExecutionStatus.SKIPPED,
        error_kind="catch_up",
        error_message=message,
    )
    found = explain(facts(late_by(6.3, created_at=DUE + 6.2 * S), job=latest, before=skipped))
    assert found.reason == "catch_up_replay"
    assert found.verdict == (
        "started 6.3 s late, replayed by catch-up after a gap: the occurrence before,"
        f" 2026-12-02 10:00:00.000Z, was skipped ({message}); its row was made at"
        " 2026-12-02 10:00:11.200Z, 6.2 s after it was due, as catch-up went through the gap;"
        " catch-up policy Latest runs the latest missed occurrence of a gap"
    )


def test_an_occurrence_replayed_after_a_pause_says_so() -> None:
    every = job(catch_up=CatchUpPolicy.ALL)
    events = [
        JobEvent(DUE - 60 * S, "paused", JobState.PAUSED, JobState.ACTIVE, 1),
        JobEvent(DUE + 60 * S, "resumed", JobState.ACTIVE, JobState.PAUSED, 1),
    ]
    # resume_job makes the first replayed occurrence due at the resume.
    replay = late_by(60.01, due_at=DUE + 60 * S, created_at=DUE + 60 * S)
    found = explain(facts(replay, job=every, events=events))
    assert found.reason == "catch_up_replay"
    assert found.verdict.startswith(
        "started 60.1 s late, replayed by catch-up after a pause: the job was paused at its"
        " instant (paused at 2026-12-02 09:59:05.000Z, resumed at 2026-12-02 10:01:05.000Z)"
    )


def test_lateness_within_the_catch_up_grace_or_of_a_lone_occurrence_is_no_replay() -> None:
    every = job(catch_up=CatchUpPolicy.ALL)
    # 4 s late: within the grace, whatever else.
    found = explain(facts(late_by(4, created_at=DUE + 3 * S), job=every))
    assert found.reason == "dispatched_late"
    # 7 s late, its row made before it was due, the next not overdue: a lone late one.
    assert explain(facts(late_by(7), job=every)).reason == "dispatched_late"
    # Catch-up policy Skip replays nothing: the first after a gap runs as it is due.
    skip = row(
        occurrence_at=DUE - 5 * S,
        due_at=DUE - 5 * S,
        status=ExecutionStatus.SKIPPED,
        error_kind="catch_up",
        error_message="catch-up policy Skip: a missed occurrence does not run",
    )
    first_after = late_by(5.5, created_at=DUE + 5.4 * S)
    assert explain(facts(first_after, before=skip)).reason == "dispatched_late"
    # Run by hand or backfilled: never a replay.
    manual = late_by(70, manual=True, created_at=DUE + 60 * S)
    assert explain(facts(manual, job=every)).reason == "dispatched_late"


def test_an_occurrence_of_the_current_pause_names_why_the_job_was_paused() -> None:
    events = [JobEvent(DUE - 60 * S, "paused", JobState.PAUSED, JobState.ACTIVE, 1)]
    tripped = "paused after 3 consecutive failures (last: execution 1f2e failed: boom)"
    by_policy = job(
        state=JobState.PAUSED,
        paused_at=DUE - 60 * S,
        paused_reason=tripped,
        paused_for_failures=True,
    )
    found = explain(facts(job=by_policy, events=events))
    assert (found.outcome, found.reason) == ("no_row", "paused")
    assert found.verdict == (
        "no row: the job was paused at this time (paused at 2026-12-02 09:59:05.000Z, not"
        f" resumed since); paused by its failure policy: {tripped}"
    )
    by_hand = replace(by_policy, paused_reason="db migration", paused_for_failures=False)
    assert explain(facts(job=by_hand, events=events)).verdict.endswith(
        "not resumed since); paused by a user: 'db migration'"
    )
    # No reason given: none named.
    silent = replace(by_hand, paused_reason=None)
    assert explain(facts(job=silent, events=events)).verdict.endswith("not resumed since)")
    # The pending row the pause cancelled names it too.
    cancelled = row(
        status=ExecutionStatus.CANCELLED,
        error_kind="paused",
        error_message="job paused after consecutive failures",
        enqueued_at=None,
        dispatch_epoch=None,
        started_at=None,
        lease_owner=None,
        finished_at=DUE - 60 * S,
    )
    assert explain(facts(cancelled, job=by_policy, events=events)).verdict == (
        "cancelled before it ran: paused: job paused after consecutive failures; paused by its"
        f" failure policy: {tripped}"
    )
    # An earlier pause, since resumed: its reason is not kept, none is named.
    over = [*events, JobEvent(DUE + 60 * S, "resumed", JobState.ACTIVE, JobState.PAUSED, 1)]
    again = replace(by_policy, paused_at=DUE + 600 * S)
    assert "failure policy" not in explain(facts(job=again, events=over)).verdict
    assert "failure policy" not in explain(facts(cancelled, job=again, events=over)).verdict
    # Not due yet while paused.
    ahead = explain(facts(job=by_policy, events=events, at=NOW + 3600 * S))
    assert ahead.verdict.endswith(f"unless resumed before; paused by its failure policy: {tripped}")

"""Why one occurrence of a job ran as it did, or has no execution at all: `explain` reads
the facts the store keeps (`Facts`: the occurrence's executions, the job's changes of state
and spec, its shard's owners by fencing epoch) and answers an `Explanation`: a verdict
first, the steps that led to it with their times, and the same as fields for scripts.

Pure, like `occurrences`: `horae.store.explain` reads the facts; the API
(`GET /jobs/{id}/explain`) and the CLI (`horae explain`) show the answer.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from horae.domain.instants import EARLIEST_INSTANT
from horae.models import ExecutionStatus, JobState
from horae.schedule import jitter_offset, latest_fire_times, next_fire_times
from horae.store.occurrences import MAX_SKIPPED_ON_RESUME
from horae.store.rows import ExecutionRow, JobRow

LATE_AFTER = timedelta(seconds=1)
"""A first attempt that started (or, unclaimed, was dispatched) more than this after its
due time was late: dispatch and claim take milliseconds when nothing is wrong."""
RECORDED_PER_GAP = MAX_SKIPPED_ON_RESUME
"""Skipped rows recorded for one gap (a pause, an outage): older missed ones leave none."""
GAP_KINDS = frozenset({"paused", "catch_up"})
"""Skip reasons recorded for the occurrences of a gap, after it."""


@dataclass(frozen=True, slots=True)
class Epoch:
    """A shard's fencing epoch in one store group: who took it, when (`shard_epoch_history`)."""

    group: str
    shard: int
    epoch: int
    owner: str | None
    taken_at: datetime | None
    moved_out: bool = False


@dataclass(frozen=True, slots=True)
class JobEvent:
    """A change of a job's state or spec (`job_events`): kind edited, paused, resumed or
    cancelled; an edit keeps the schedule it replaced."""

    at: datetime
    kind: str
    state: JobState
    prior_state: JobState
    spec_version: int
    prior_cron: str | None = None
    prior_time_zone: str | None = None
    prior_run_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Found:
    """An execution, and the store group it was read from (its epochs are that group's)."""

    group: str
    row: ExecutionRow


@dataclass(frozen=True)
class Facts:
    """What the store holds about the occurrence of `job` at `at`."""

    job: JobRow
    group: str
    """The job's store group now."""
    at: datetime
    now: datetime
    rows: Sequence[Found] = ()
    """The executions whose occurrence is `at` (attempts, a cancelled one, a manual run)."""
    before: ExecutionRow | None = None
    """The job's latest first attempt (not cancelled) of an occurrence before `at`."""
    after: ExecutionRow | None = None
    """Its earliest first attempt (not cancelled) of an occurrence after `at`."""
    events: Sequence[JobEvent] = ()
    epochs: Sequence[Epoch] = ()
    """The job's shard's epochs around the occurrence, in each group read."""
    history_from: datetime | None = None
    """The oldest due time whose executions are kept (retention)."""


@dataclass(frozen=True, slots=True)
class Step:
    at: datetime | None
    what: str
    detail: str


@dataclass(frozen=True, slots=True)
class Attempt:
    execution_id: uuid.UUID
    attempt: int
    status: ExecutionStatus
    manual: bool
    due_at: datetime
    enqueued_at: datetime | None
    dispatch_epoch: int | None
    dispatched_by: str | None
    """The replica that held the dispatch epoch (or that skipped it), from the history."""
    started_at: datetime | None
    worker: str | None
    finished_at: datetime | None
    error_kind: str | None
    error_message: str | None


@dataclass(frozen=True, slots=True)
class OwnerChange:
    """The shard changed owner between the due time and the dispatch."""

    shard: int
    at: datetime | None
    from_owner: str | None
    from_epoch: int | None
    to_owner: str | None
    to_epoch: int


@dataclass(frozen=True)
class Explanation:
    job_id: uuid.UUID
    at: datetime
    occurrence_at: datetime | None
    """`at` when it is an occurrence of the job (a fire time, or a manual run's instant)."""
    outcome: str
    """ran_on_time, ran_late, failed, in_progress, skipped, cancelled, not_due_yet, overdue,
    no_row or not_a_fire_time."""
    reason: str | None
    """Why, as a word: a skip's or cancel's kind, a lateness's cause, a missing row's."""
    verdict: str
    shard: int
    due_at: datetime | None = None
    late_seconds: float | None = None
    owner_change: OwnerChange | None = None
    fire_time_before: datetime | None = None
    fire_time_after: datetime | None = None
    attempts: list[Attempt] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)


def when(value: datetime | None) -> str:
    """An instant as `2026-12-02 10:00:07.123Z` (UTC, milliseconds); `-` for none."""
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _secs(delta: timedelta) -> str:
    return f"{delta.total_seconds():.1f} s"


# -- what the job was at an instant -------------------------------------------------------


def schedule_at(f: Facts, t: datetime) -> tuple[str | None, str, datetime | None]:
    """(cron, time zone, run_at) of the job's spec in force at `t`: the one the first edit
    at or after `t` replaced, else the job's own."""
    for e in sorted(f.events, key=lambda e: e.at):
        if e.kind == "edited" and e.at >= t:
            return e.prior_cron, e.prior_time_zone or "UTC", e.prior_run_at
    return f.job.cron, f.job.time_zone, f.job.run_at


def state_at(f: Facts, t: datetime) -> JobState:
    """The job's state at `t`, by its recorded changes (or, with none, its row)."""
    events = sorted(f.events, key=lambda e: e.at)
    done = [e for e in events if e.at <= t]
    if done:
        return done[-1].state
    if events:
        return events[0].prior_state
    job = f.job
    if job.state == JobState.PAUSED and job.paused_at is not None and t >= job.paused_at:
        return JobState.PAUSED
    if job.state == JobState.CANCELLED and t >= job.updated_at:
        return JobState.CANCELLED
    return JobState.ACTIVE if job.state != JobState.COMPLETED else job.state


def fire_times_around(
    cron: str | None, time_zone: str, run_at: datetime | None, t: datetime
) -> tuple[bool, datetime | None, datetime | None]:
    """(whether `t` is a fire time, the latest fire time before it, the first after it)."""
    if run_at is not None:
        return run_at == t, run_at if run_at < t else None, run_at if run_at > t else None
    assert cron is not None
    tick = timedelta(microseconds=1)
    hit = next_fire_times(run_at=None, cron=cron, time_zone=time_zone, after=t - tick, count=1)
    earlier = latest_fire_times(cron, time_zone, after=EARLIEST_INSTANT, until=t - tick, count=1)
    later = next_fire_times(run_at=None, cron=cron, time_zone=time_zone, after=t, count=1)
    return hit == [t], earlier[-1] if earlier else None, later[0] if later else None


def default_occurrence(
    job: JobRow, events: Sequence[JobEvent], latest: ExecutionRow | None, now: datetime
) -> datetime:
    """The occurrence `explain` looks at when not told: the job's most recent at or before
    `now` (of its schedule since it was created or last edited, or the latest it has an
    execution of); with none yet, its next."""
    if job.run_at is not None:
        return job.run_at
    assert job.cron is not None
    edits = [e.at for e in events if e.kind == "edited"]
    since = max([job.created_at, *edits]) - timedelta(microseconds=1)
    fires = latest_fire_times(job.cron, job.time_zone, after=since, until=now, count=1)
    found = [*fires, *([latest.occurrence_at] if latest is not None else [])]
    if found:
        return max(found)
    upcoming = next_fire_times(
        run_at=None, cron=job.cron, time_zone=job.time_zone, after=now, count=1
    )
    return upcoming[0] if upcoming else now


# -- the shard's owners --------------------------------------------------------------------


def _epochs(f: Facts, group: str) -> list[Epoch]:
    return sorted((e for e in f.epochs if e.group == group), key=lambda e: e.epoch)


def _epoch_at(f: Facts, group: str, t: datetime) -> Epoch | None:
    held = [e for e in _epochs(f, group) if e.taken_at is not None and e.taken_at <= t]
    return held[-1] if held else None


def _epoch(f: Facts, group: str, number: int | None) -> Epoch | None:
    return next((e for e in _epochs(f, group) if e.epoch == number), None)


def _held(e: Epoch | None) -> str:
    if e is None:
        return "which no scheduler has taken (none recorded)"
    return f"owned by {e.owner or '?'} (epoch {e.epoch}, since {when(e.taken_at)})"


def _acting(f: Facts, found: Found) -> Epoch | None:
    """The epoch under which the scheduler acted on the row: its dispatch epoch; the one in
    force when it skipped it; or, for a row a worker claimed before the dispatch was
    recorded (which then leaves the row as the claim made it, without a dispatch epoch), the
    one in force at the claim: the claim came inside the publishing transaction, which holds
    the epoch (`dispatch.fenced`), so no other replica took the shard in between."""
    r = found.row
    if r.dispatch_epoch is not None:
        return _epoch(f, found.group, r.dispatch_epoch)
    if r.status == ExecutionStatus.SKIPPED and r.finished_at is not None:
        return _epoch_at(f, found.group, r.finished_at)
    if r.started_at is not None and r.enqueued_at is None:
        return _epoch_at(f, found.group, r.started_at)
    return None


def _owner_change(f: Facts, found: Found, due: datetime) -> OwnerChange | None:
    acting = _acting(f, found)
    if acting is None or acting.taken_at is None or acting.taken_at <= due:
        return None
    before = _epoch_at(f, found.group, due)
    return OwnerChange(
        shard=found.row.shard,
        at=acting.taken_at,
        from_owner=before.owner if before else None,
        from_epoch=before.epoch if before else None,
        to_owner=acting.owner,
        to_epoch=acting.epoch,
    )


def _change_text(c: OwnerChange) -> str:
    if c.from_owner is None:
        return f"shard {c.shard} was taken at {when(c.at)} by {c.to_owner or '?'}"
    if c.from_owner == c.to_owner:
        return f"shard {c.shard} was taken again at {when(c.at)} by {c.to_owner}"
    return f"shard {c.shard} changed owner at {when(c.at)} (replica {c.from_owner} → {c.to_owner})"


# -- an occurrence with executions -----------------------------------------------------------


def _attempt(f: Facts, found: Found) -> Attempt:
    r = found.row
    acting = _acting(f, found)
    return Attempt(
        execution_id=r.id,
        attempt=r.attempt,
        status=r.status,
        manual=r.manual,
        due_at=r.due_at,
        enqueued_at=r.enqueued_at,
        dispatch_epoch=r.dispatch_epoch,
        dispatched_by=acting.owner if acting else None,
        started_at=r.started_at,
        worker=r.lease_owner,
        finished_at=r.finished_at,
        error_kind=r.error_kind,
        error_message=r.error_message,
    )


def _why(r: ExecutionRow) -> str:
    return ": ".join(p for p in (r.error_kind, r.error_message) if p) or "no reason recorded"


def _steps_of(f: Facts, found: Found, due: datetime, steps: list[Step]) -> None:
    r = found.row
    label = f"attempt {r.attempt}"
    if r.attempt == 1:
        what = "triggered" if r.manual else "due"
        steps.append(
            Step(due, what, f"on shard {r.shard}, {_held(_epoch_at(f, found.group, due))}")
        )
        if r.due_at > due:
            steps.append(
                Step(
                    r.due_at,
                    "due again",
                    "its due time moved (held back by its tenant's "
                    "max_running at the claim, handed back by a stopping worker, or replayed)",
                )
            )
    else:
        steps.append(Step(r.created_at, "retry", f"{label} scheduled, due at {when(r.due_at)}"))
    end = r.enqueued_at or r.finished_at or r.started_at
    if end is not None:
        for e in _epochs(f, found.group):
            if e.taken_at is not None and r.due_at < e.taken_at <= end:
                steps.append(
                    Step(
                        e.taken_at,
                        "shard taken",
                        f"shard {r.shard} by {e.owner or '?'} (epoch {e.epoch})",
                    )
                )
    acting = _acting(f, found)
    by = f"{acting.owner or '?'} (epoch {acting.epoch})" if acting else "an unrecorded owner"
    if r.enqueued_at is not None:
        lag = r.enqueued_at - r.due_at
        how = (
            f"{_secs(lag)} after due"
            if lag >= timedelta(0)
            else f"{_secs(-lag)} early (dispatch lead)"
        )
        steps.append(Step(r.enqueued_at, "dispatched", f"{label} by {by}, {how}"))
    if r.started_at is not None:
        lag = r.started_at - r.due_at
        steps.append(
            Step(
                r.started_at,
                "claimed",
                f"{label} by worker {r.lease_owner or '?'}, {_secs(lag)} after due"
                + ("" if r.enqueued_at else f" (published by {by})"),
            )
        )
    if r.status == ExecutionStatus.SKIPPED:
        steps.append(Step(r.finished_at, "skipped", f"by {by}: {_why(r)}"))
    elif r.status == ExecutionStatus.CANCELLED:
        steps.append(Step(r.finished_at, "cancelled", _why(r)))
    elif r.status.terminal:
        error = "" if r.status == ExecutionStatus.SUCCEEDED else f": {_why(r)}"
        steps.append(Step(r.finished_at, r.status.value, f"{label}{error}"))


def _lateness(f: Facts, found: Found, due: datetime) -> tuple[str, str, float, OwnerChange | None]:
    """(how late, in words; the cause as a word; seconds late; an owner change) of a first
    attempt that started or was dispatched."""
    r = found.row
    begun = r.started_at or r.enqueued_at
    assert begun is not None
    late = begun - due
    change = _owner_change(f, found, due)
    started = "started" if r.started_at else "dispatched"
    if late <= LATE_AFTER:
        return f"{started} on time", "on_time", late.total_seconds(), change
    head = f"{started} {_secs(late)} late"
    if change is not None:
        return (
            f"{head}: {_change_text(change)}",
            "shard_owner_changed",
            late.total_seconds(),
            change,
        )
    if r.due_at - due > LATE_AFTER:
        why = (
            f"its due time moved to {when(r.due_at)} (held back by its tenant's max_running,"
            " handed back by a stopping worker, or replayed)"
        )
        return f"{head}: {why}", "due_time_moved", late.total_seconds(), None
    if r.enqueued_at is not None and r.enqueued_at - due > LATE_AFTER:
        acting = _acting(f, found)
        who = acting.owner if acting and acting.owner else "the shard's owner"
        why = (
            f"{who} dispatched it {_secs(r.enqueued_at - due)} after it was due (the"
            " scheduler was behind, or held it back for its tenant's max_running)"
        )
        return f"{head}: {why}", "dispatched_late", late.total_seconds(), None
    if r.started_at is not None:
        queued = r.started_at - max(due, r.enqueued_at or due)
        why = (
            f"it waited {_secs(queued)} in the queue for a worker"
            " (none free, or none serving its task)"
        )
        return f"{head}: {why}", "waited_for_worker", late.total_seconds(), None
    return head, "unknown", late.total_seconds(), None


def _with_rows(f: Facts) -> Explanation:
    found = sorted(f.rows, key=lambda x: (x.row.manual, x.row.attempt, x.row.due_at, x.row.id))
    scheduled = [x for x in found if not x.row.manual]
    chain = scheduled or found  # a manual run at the instant when no scheduled one is there
    live = [x for x in chain if x.row.status != ExecutionStatus.CANCELLED or x.row.attempt > 1]
    first_rows = [x for x in (live or chain) if x.row.attempt == 1]
    first = (first_rows or live or chain)[0]
    r = first.row
    due = (
        r.occurrence_at
        if r.manual
        else min(r.due_at, r.occurrence_at + jitter_offset(f.job.id, f.job.jitter_seconds))
    )
    steps: list[Step] = []
    for x in chain:
        _steps_of(f, x, due if x.row.attempt == 1 else x.row.due_at, steps)
    for x in found:
        if x not in chain:
            steps.append(
                Step(
                    x.row.occurrence_at,
                    "triggered",
                    f"also a manual run at this instant: {x.row.status.value}",
                )
            )
    steps.sort(key=lambda s: s.at or f.now)
    last = max((x for x in chain if x.row.attempt >= r.attempt), key=lambda x: x.row.attempt).row
    base = Explanation(
        job_id=f.job.id,
        at=f.at,
        occurrence_at=r.occurrence_at,
        outcome="",
        reason=None,
        verdict="",
        shard=r.shard,
        due_at=due,
        attempts=[_attempt(f, x) for x in chain],
        steps=steps,
    )
    manual = "manual run " if r.manual else ""
    if r.status == ExecutionStatus.SKIPPED:
        change = _owner_change(f, first, due)
        why = f"; {_change_text(change)}" if change else ""
        return replace(
            base,
            outcome="skipped",
            reason=r.error_kind,
            verdict=f"{manual}skipped: {r.error_message or _why(r)}{why}",
            owner_change=change,
        )
    if r.status == ExecutionStatus.CANCELLED:
        return replace(
            base,
            outcome="cancelled",
            reason=r.error_kind,
            verdict=f"{manual}cancelled before it ran: {_why(r)}",
        )
    if r.status == ExecutionStatus.SCHEDULED:
        held = _held(_epoch_at(f, f.group, f.now))
        if r.due_at > f.now:
            return replace(
                base,
                outcome="not_due_yet",
                reason=None,
                verdict=f"not due yet: due at {when(r.due_at)} on shard {r.shard}, {held}",
            )
        return replace(
            base,
            outcome="overdue",
            reason=None,
            verdict=f"due {_secs(f.now - r.due_at)} ago and not dispatched yet:"
            f" shard {r.shard}, {held}",
        )
    timing, cause, late, change = _lateness(f, first, due)
    outcome = "ran_on_time" if cause == "on_time" else "ran_late"
    reason = None if cause == "on_time" else cause
    tail = ""
    if last.status in (ExecutionStatus.QUEUED, ExecutionStatus.RUNNING):
        outcome = "in_progress"
        tail = (
            f"; attempt {last.attempt} running on worker {last.lease_owner or '?'}"
            if last.status == ExecutionStatus.RUNNING
            else f"; attempt {last.attempt} queued, not claimed yet"
        )
    elif last.status == ExecutionStatus.SUCCEEDED:
        tail = f"; succeeded on attempt {last.attempt}" if last.attempt > 1 else ""
    elif last.status.terminal:
        outcome = "failed"
        tail = f"; {last.status.value} after {last.attempt} attempt(s): {_why(last)}"
    verdict = (
        f"{manual}{timing}{tail}"
        if not (outcome == "ran_on_time" and not tail)
        else f"{manual}ran on time"
    )
    return replace(
        base,
        outcome=outcome,
        reason=reason,
        verdict=verdict,
        late_seconds=late,
        owner_change=change,
    )


# -- an occurrence without executions -------------------------------------------------------


def _gap_row(f: Facts) -> ExecutionRow | None:
    """The skipped row of a gap recorded after `at` (the oldest recorded of it), if the
    occurrence at `at` lies in such a gap: the next row is one, and the row before (if any)
    is not a skipped one of the same gap."""
    nxt = f.after
    if nxt is None or nxt.status != ExecutionStatus.SKIPPED or nxt.error_kind not in GAP_KINDS:
        return None
    return nxt


def _without_rows(f: Facts) -> Explanation:
    t, job = f.at, f.job
    cron, zone, run_at = schedule_at(f, t)
    is_fire, earlier, later = fire_times_around(cron, zone, run_at, t)
    schedule = f"once at {when(run_at)}" if run_at is not None else f"{cron} ({zone})"
    checked = [
        f"the job's executions with occurrence {when(t)}: none",
        f"the schedule in force then: {schedule}",
    ]
    base = Explanation(
        job_id=job.id,
        at=t,
        occurrence_at=t if is_fire else None,
        outcome="no_row",
        reason=None,
        verdict="",
        shard=job.shard,
        checked=checked,
    )
    if not is_fire:
        return replace(
            base,
            outcome="not_a_fire_time",
            reason="not_a_fire_time",
            verdict=f"no occurrence at {when(t)}: not a fire time of {schedule}; the nearest are "
            f"{when(earlier)} before and {when(later)} after",
            fire_time_before=earlier,
            fire_time_after=later,
        )
    due = t + jitter_offset(job.id, job.jitter_seconds)
    checked.append(f"the job's creation: {when(job.created_at)}")
    if t < job.created_at and not (run_at is not None and t == run_at):
        return replace(
            base,
            outcome="no_row",
            reason="before_created",
            verdict=f"no row: the job did not exist yet at {when(t)}"
            f" (created at {when(job.created_at)})",
        )
    state = state_at(f, t)
    checked.append(f"the job's state then: {state.value}")
    if state == JobState.CANCELLED:
        ended = next(
            (e.at for e in f.events if e.kind == "cancelled" and e.at <= t), job.updated_at
        )
        return replace(
            base,
            outcome="no_row",
            reason="cancelled",
            verdict=f"no row: the job was cancelled at {when(ended)}, before this occurrence",
        )
    if t > f.now:
        if job.state == JobState.ACTIVE:
            held = _held(_epoch_at(f, f.group, f.now))
            return replace(
                base,
                outcome="not_due_yet",
                reason=None,
                verdict=f"not due yet: will be due at {when(due)} on shard {job.shard}, {held}",
                due_at=due,
            )
        return replace(
            base,
            outcome="not_due_yet",
            reason=job.state.value,
            verdict=f"not due yet, and the job is {job.state.value}: it will not run at"
            f" {when(t)} unless resumed before",
        )
    if f.history_from is not None:
        checked.append(f"the history kept: executions due from {when(f.history_from)}")
        if due < f.history_from:
            return replace(
                base,
                outcome="no_row",
                reason="retention",
                verdict=f"no row: executions due before {when(f.history_from)} were dropped"
                " with their day's partition (retention)",
            )
    gap = _gap_row(f)
    cap = f"older than the newest {RECORDED_PER_GAP} recorded for that gap"
    if state == JobState.PAUSED:
        paused = max(
            (e.at for e in f.events if e.kind == "paused" and e.at <= t), default=job.paused_at
        )
        resumed = min((e.at for e in f.events if e.kind == "resumed" and e.at > t), default=None)
        span = f"paused at {when(paused)}, " + (
            f"resumed at {when(resumed)}" if resumed else "not resumed since"
        )
        older = f"; {cap}" if gap is not None or resumed is not None else ""
        return replace(
            base,
            outcome="no_row",
            reason="paused",
            verdict=f"no row: the job was paused at this time ({span}){older}",
        )
    if gap is not None:
        while_ = (
            "the job was paused"
            if gap.error_kind == "paused"
            else "the scheduler was not dispatching"
        )
        return replace(
            base,
            outcome="no_row",
            reason=f"{gap.error_kind}_gap",
            verdict=f"no row: missed while {while_}, {cap}"
            f" (from {when(gap.occurrence_at)}: {_why(gap)})",
        )
    nearest = [when(x.occurrence_at) if x else "none" for x in (f.before, f.after)]
    checked.append(f"the nearest executions: {nearest[0]} before, {nearest[1]} after")
    return replace(
        base,
        outcome="no_row",
        reason="unknown",
        verdict=f"no row, and no recorded reason: checked {'; '.join(checked)}",
    )


def explain(f: Facts) -> Explanation:
    """Why the occurrence at `f.at` went as it did (`Facts`: what the store holds)."""
    return _with_rows(f) if f.rows else _without_rows(f)

"""An occurrence with executions: its steps (due, owner changes, dispatch, claim, each
attempt's outcome) and the verdict (on time; late, and why; skipped; cancelled; failed; in
progress; not due yet)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from horae.models import ExecutionStatus
from horae.schedule import jitter_offset
from horae.store.explanation.facts import (
    LATE_AFTER,
    Attempt,
    Explanation,
    Facts,
    Found,
    OwnerChange,
    Step,
    secs,
    when,
)
from horae.store.explanation.owners import (
    acted_under,
    change_text,
    epoch_at,
    epochs,
    owned_by,
    owner_change,
)
from horae.store.explanation.replay import replayed
from horae.store.explanation.timeline import pause_reason
from horae.store.rows import ExecutionRow


def _attempt(f: Facts, found: Found) -> Attempt:
    r = found.row
    acting = acted_under(f, found)
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


def reason_of(r: ExecutionRow) -> str:
    return ": ".join(p for p in (r.error_kind, r.error_message) if p) or "no reason recorded"


def _steps_of(f: Facts, found: Found, due: datetime, steps: list[Step]) -> None:
    r = found.row
    label = f"attempt {r.attempt}"
    if r.attempt == 1:
        owner = f"on shard {r.shard}, {owned_by(epoch_at(f, found.group, due))}"
        if r.backfill is not None:
            steps.append(
                Step(
                    r.created_at,
                    "backfilled",
                    f"by backfill {r.backfill}: a past occurrence run now, due at"
                    f" {when(r.due_at)} {owner}",
                )
            )
        elif r.manual:
            steps.append(Step(due, "triggered", f"run by hand, {owner}"))
        else:
            steps.append(Step(due, "due", owner))
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
        for e in epochs(f, found.group):
            if e.taken_at is not None and r.due_at < e.taken_at <= end:
                steps.append(
                    Step(
                        e.taken_at,
                        "shard taken",
                        f"shard {r.shard} by {e.owner or '?'} (epoch {e.epoch})",
                    )
                )
    acting = acted_under(f, found)
    by = f"{acting.owner or '?'} (epoch {acting.epoch})" if acting else "an unrecorded owner"
    if r.enqueued_at is not None:
        lag = r.enqueued_at - r.due_at
        how = (
            f"{secs(lag)} after due"
            if lag >= timedelta(0)
            else f"{secs(-lag)} early (dispatch lead)"
        )
        steps.append(Step(r.enqueued_at, "dispatched", f"{label} by {by}, {how}"))
    if r.started_at is not None:
        lag = r.started_at - r.due_at
        steps.append(
            Step(
                r.started_at,
                "claimed",
                f"{label} by worker {r.lease_owner or '?'}, {secs(lag)} after due"
                + ("" if r.enqueued_at else f" (published by {by})"),
            )
        )
    if r.status == ExecutionStatus.SKIPPED:
        steps.append(Step(r.finished_at, "skipped", f"by {by}: {reason_of(r)}"))
    elif r.status == ExecutionStatus.CANCELLED:
        steps.append(Step(r.finished_at, "cancelled", reason_of(r)))
    elif r.status.terminal:
        error = "" if r.status == ExecutionStatus.SUCCEEDED else f": {reason_of(r)}"
        steps.append(Step(r.finished_at, r.status.value, f"{label}{error}"))


def _lateness(f: Facts, found: Found, due: datetime) -> tuple[str, str, float, OwnerChange | None]:
    """(how late, in words; the cause as a word; seconds late; an owner change) of a first
    attempt that started or was dispatched."""
    r = found.row
    # (a row that ended without a recorded start or dispatch: judged by its end)
    begun = r.started_at or r.enqueued_at or r.finished_at or due
    late = begun - due
    change = owner_change(f, found, due)
    started = "started" if r.started_at else "dispatched"
    if late <= LATE_AFTER:
        return f"{started} on time", "on_time", late.total_seconds(), change
    head = f"{started} {secs(late)} late"
    replay = replayed(f, r, due)
    if replay is not None:
        shown, paused = replay
        after = "a pause" if paused else "a gap"
        tail = f"; {change_text(change)}" if change is not None else ""
        return (
            f"{head}, replayed by catch-up after {after}: {shown}{tail}",
            "catch_up_replay",
            late.total_seconds(),
            change,
        )
    if change is not None:
        return (
            f"{head}: {change_text(change)}",
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
        acting = acted_under(f, found)
        who = acting.owner if acting and acting.owner else "the shard's owner"
        why = (
            f"{who} dispatched it {secs(r.enqueued_at - due)} after it was due (the"
            " scheduler was behind, or held it back for its tenant's max_running)"
        )
        return f"{head}: {why}", "dispatched_late", late.total_seconds(), None
    if r.started_at is not None:
        queued = r.started_at - max(due, r.enqueued_at or due)
        why = (
            f"it waited {secs(queued)} in the queue for a worker"
            " (none free, or none serving its task)"
        )
        return f"{head}: {why}", "waited_for_worker", late.total_seconds(), None
    return head, "unknown", late.total_seconds(), None


def _origin(r: ExecutionRow) -> str:
    """How an occurrence outside the schedule came to run, as the verdict's start: a
    backfill's or a trigger's (its lateness is then from when it was made due, not from
    its occurrence)."""
    if r.backfill is not None:
        return f"backfilled by backfill {r.backfill} at {when(r.created_at)}; "
    if r.manual:
        return f"run by hand at {when(r.created_at)}; "
    return ""


def _origin_word(r: ExecutionRow) -> str | None:
    return "backfill" if r.backfill is not None else "manual" if r.manual else None


def explain_rows(f: Facts) -> Explanation:
    """The occurrence's path through its executions (the scheduled ones; a manual run at the
    same instant is noted, or explained when it is the only one there), and the verdict."""
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
        else r.due_at  # a backfill's: due when it was made, its occurrence long past
        if r.backfill is not None
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
    # (in the order things happen to each attempt: clocks of different hosts may disagree)
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
    origin = _origin(r)
    if r.status == ExecutionStatus.SKIPPED:
        change = owner_change(f, first, due)
        why = f"; {change_text(change)}" if change else ""
        return replace(
            base,
            outcome="skipped",
            reason=r.error_kind,
            verdict=f"{origin}skipped: {r.error_message or reason_of(r)}{why}",
            owner_change=change,
        )
    if r.status == ExecutionStatus.CANCELLED:
        paused = f.job.paused_at
        by = (
            pause_reason(f.job)
            if r.error_kind == "paused"
            and paused is not None
            and r.finished_at is not None
            and r.finished_at >= paused  # cancelled by the current pause
            else None
        )
        return replace(
            base,
            outcome="cancelled",
            reason=r.error_kind,
            verdict=f"{origin}cancelled before it ran: {reason_of(r)}"
            + (f"; paused {by}" if by else ""),
        )
    if r.status == ExecutionStatus.SCHEDULED:
        held = owned_by(epoch_at(f, f.group, f.now))
        if r.due_at > f.now:
            return replace(
                base,
                outcome="not_due_yet",
                reason=None,
                verdict=f"not due yet: due at {when(r.due_at)} on shard {r.shard}, {held}",
            )
        if f.now - r.due_at <= LATE_AFTER:
            return replace(
                base,
                outcome="in_progress",
                reason=None,
                verdict=f"due at {when(r.due_at)}, being dispatched or claimed: shard {r.shard},"
                f" {held}",
            )
        return replace(
            base,
            outcome="overdue",
            reason=None,
            verdict=f"due {secs(f.now - r.due_at)} ago and not claimed yet (published and"
            f" waiting for a worker, or not dispatched yet): shard {r.shard}, {held}",
        )
    timing, cause, late, change = _lateness(f, first, due)
    outcome = "ran_on_time" if cause == "on_time" else "ran_late"
    reason = cause if cause != "on_time" else _origin_word(r)
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
        tail = f"; {last.status.value} after {last.attempt} attempt(s): {reason_of(last)}"
    verdict = (
        f"{origin}ran on time"
        if outcome == "ran_on_time" and not tail
        else f"{origin}{timing}{tail}"
    )
    return replace(
        base,
        outcome=outcome,
        reason=reason,
        verdict=verdict,
        late_seconds=late,
        owner_change=change,
    )

"""An occurrence without executions: why it has none (not a fire time, before the job
existed, cancelled, not due yet, past retention, paused, an older part of a recorded gap),
or, when nothing says, what was checked."""

from __future__ import annotations

from dataclasses import replace

from horae.models import ExecutionStatus, JobState
from horae.schedule import jitter_offset
from horae.store.explanation.facts import (
    GAP_KINDS,
    RECORDED_PER_GAP,
    Explanation,
    Facts,
    when,
)
from horae.store.explanation.owners import epoch_at, owned_by
from horae.store.explanation.ran import reason_of
from horae.store.explanation.timeline import (
    fire_times_around,
    pause_reason,
    schedule_at,
    state_at,
)
from horae.store.rows import ExecutionRow


def _gap_row(f: Facts) -> ExecutionRow | None:
    """The skipped row of a gap recorded after `at` (the oldest recorded of it), if the
    occurrence at `at` lies in such a gap: the next row is one, and the row before (if any)
    is not a skipped one of the same gap."""
    nxt = f.after
    if nxt is None or nxt.status != ExecutionStatus.SKIPPED or nxt.error_kind not in GAP_KINDS:
        return None
    return nxt


def explain_missing(f: Facts) -> Explanation:
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
            held = owned_by(epoch_at(f, f.group, f.now))
            return replace(
                base,
                outcome="not_due_yet",
                reason=None,
                verdict=f"not due yet: will be due at {when(due)} on shard {job.shard}, {held}",
                due_at=due,
            )
        why = pause_reason(job)
        return replace(
            base,
            outcome="not_due_yet",
            reason=job.state.value,
            verdict=f"not due yet, and the job is {job.state.value}: it will not run at"
            f" {when(t)} unless resumed before" + (f"; paused {why}" if why else ""),
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
        # (a pause within catch-up's grace of its resume records no skipped rows)
        older = f"; {cap}" if gap is not None else ""
        why = pause_reason(job) if resumed is None else None  # the current pause's
        return replace(
            base,
            outcome="no_row",
            reason="paused",
            verdict=f"no row: the job was paused at this time ({span}){older}"
            + (f"; paused {why}" if why else ""),
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
            f" (from {when(gap.occurrence_at)}: {reason_of(gap)})",
        )
    nearest = [when(x.occurrence_at) if x else "none" for x in (f.before, f.after)]
    checked.append(f"the nearest executions: {nearest[0]} before, {nearest[1]} after")
    return replace(
        base,
        outcome="no_row",
        reason="unknown",
        verdict=f"no row, and no recorded reason: checked {'; '.join(checked)}",
    )

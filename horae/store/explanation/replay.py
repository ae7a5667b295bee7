"""A scheduled occurrence that ran late because catch-up replayed it after a gap (an outage,
a pause), told from the rows: the occurrence before it skipped for that gap, later ones
already overdue when it was dispatched, its row made after it was due (as catch-up walks a
gap one occurrence at a time), or the job paused at its instant."""

from __future__ import annotations

from datetime import datetime, timedelta

from horae.domain.durations import format_duration
from horae.domain.limits import CATCH_UP_GRACE, MAX_CATCH_UP_RUNS
from horae.models import CatchUpPolicy, ExecutionStatus, JobState
from horae.schedule import count_fire_times, jitter_offset
from horae.store.explanation.facts import GAP_KINDS, LATE_AFTER, Facts, secs, when
from horae.store.explanation.timeline import fire_times_around, schedule_at, state_at
from horae.store.rows import ExecutionRow

_TICK = timedelta(microseconds=1)


def _policy(f: Facts) -> str:
    job = f.job
    if job.catch_up == CatchUpPolicy.LATEST:
        return "catch-up policy Latest runs the latest missed occurrence of a gap"
    window = job.catch_up_window_seconds
    within = f" due within its window of {format_duration(window)}" if window else ""
    return f"catch-up policy {job.catch_up.value} runs the missed occurrences of a gap{within}"


def _pause_span(f: Facts, t: datetime) -> str:
    paused = max((e.at for e in f.events if e.kind == "paused" and e.at <= t), default=None)
    resumed = min((e.at for e in f.events if e.kind == "resumed" and e.at > t), default=None)
    return f"paused at {when(paused)}, resumed at {when(resumed)}"


def replayed(f: Facts, r: ExecutionRow, due: datetime) -> tuple[str, bool] | None:
    """(what shows that catch-up replayed `r`, the scheduled first attempt of an occurrence,
    after a gap; whether the gap was a pause), or None when the rows do not show it: it was
    dispatched within `CATCH_UP_GRACE` of its due time (lateness, not a gap), or nothing
    around it says a gap, or the job's policy (now) is Skip."""
    if r.manual or r.backfill is not None or r.attempt != 1 or f.job.catch_up == CatchUpPolicy.SKIP:
        return None  # (Skip replays nothing: the first occurrence after a gap runs as due)
    dispatched = r.enqueued_at or r.started_at
    if dispatched is None or dispatched - due <= CATCH_UP_GRACE:
        return None
    t = r.occurrence_at
    cron, zone, run_at = schedule_at(f, t)
    if cron is None:  # a one-off runs late, whatever its policy
        return None
    _, earlier, later = fire_times_around(cron, zone, run_at, t)
    shown: list[str] = []
    paused = state_at(f, t) == JobState.PAUSED
    if paused:
        shown.append(f"the job was paused at its instant ({_pause_span(f, t)})")
    prior = f.before
    if (
        prior is not None
        and prior.occurrence_at == earlier
        and prior.status == ExecutionStatus.SKIPPED
        and prior.error_kind in GAP_KINDS
    ):
        why = prior.error_message or prior.error_kind
        shown.append(f"the occurrence before, {when(earlier)}, was skipped ({why})")
    if later is not None:
        offset = jitter_offset(f.job.id, f.job.jitter_seconds)
        overdue = count_fire_times(
            cron,
            zone,
            start=later,
            before=dispatched - CATCH_UP_GRACE - offset + _TICK,
            cap=MAX_CATCH_UP_RUNS,
        )
        if overdue:
            many = f"more than {MAX_CATCH_UP_RUNS}" if overdue > MAX_CATCH_UP_RUNS else overdue
            shown.append(
                f"{many} later occurrence(s) were overdue too when it was dispatched"
                f" at {when(dispatched)}"
            )
    if r.created_at - due > LATE_AFTER:
        shown.append(
            f"its row was made at {when(r.created_at)}, {secs(r.created_at - due)} after it"
            " was due, as catch-up went through the gap"
        )
    if not shown:
        return None
    return "; ".join([*shown, _policy(f)]), paused

"""What the job was at an instant: its schedule then (an edit keeps the one it replaced),
its state then, whether an instant is one of its fire times, and which occurrence to
explain when none is named."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from horae.domain.instants import EARLIEST_INSTANT
from horae.models import JobState
from horae.schedule import latest_fire_times, next_fire_times
from horae.store.explanation.facts import Facts, JobEvent
from horae.store.rows import ExecutionRow, JobRow


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


def pause_reason(job: JobRow) -> str | None:
    """Why the job's current pause began, as a verdict adds it: its failure policy tripped
    (with the failures' count and the last one), or the reason a user gave; None when it is
    not paused, or no reason was given. (Only the current pause's is kept.)"""
    if job.state != JobState.PAUSED:
        return None
    if job.paused_for_failures:
        return f"by its failure policy: {job.paused_reason or 'paused after consecutive failures'}"
    if job.paused_reason:
        return f"by a user: {job.paused_reason!r}"
    return None


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

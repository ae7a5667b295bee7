"""Occurrence arithmetic, pure: when a job fires next, first, and what of a gap (an outage,
a pause) runs. No I/O: the store's writes call these and insert what they answer."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from horae.domain.durations import format_duration
from horae.domain.limits import CATCH_UP_GRACE, MAX_CATCH_UP_RUNS, MAX_SKIPPED_ROWS
from horae.models import CatchUpPolicy, JobSpec
from horae.schedule import count_fire_times as count_fire_times
from horae.schedule import (
    cron_times,
    fires_per_minute,
    jitter_offset,
    latest_fire_times,
    next_fire_times,
)


@dataclass(frozen=True, slots=True)
class Occurrence:
    """A nominal fire time, and when it is due (the job's jitter added)."""

    occurrence_at: datetime
    due_at: datetime


def next_occurrence(job_id: uuid.UUID, spec: JobSpec, after: datetime) -> Occurrence | None:
    """The first nominal fire time strictly after `after`, and when it is due (jitter added)."""
    times = next_fire_times(
        run_at=spec.run_at, cron=spec.cron, time_zone=spec.time_zone, after=after, count=1
    )
    if not times:
        return None
    return Occurrence(times[0], times[0] + jitter_offset(job_id, spec.jitter_seconds))


def first_occurrence(job_id: uuid.UUID, spec: JobSpec, now: datetime) -> Occurrence | None:
    """A new job's first occurrence: its first fire time from `now` on; a one-off whose time
    has just passed (within its deadline, checked by the caller) fires now."""
    first = next_occurrence(job_id, spec, now - timedelta(microseconds=1))
    if first is None and spec.run_at is not None:
        first = Occurrence(spec.run_at, spec.run_at)
    return first


def rate(spec: JobSpec) -> float:
    """The job's fire rate as tenant quotas count it (`fires_per_minute`)."""
    return fires_per_minute(spec.cron, spec.time_zone)


@dataclass(frozen=True, slots=True)
class Skipped:
    """An occurrence of a gap that does not run, and why (an `error_message`)."""

    occurrence: Occurrence
    message: str


@dataclass(frozen=True, slots=True)
class CatchUp:
    """What runs of a gap, as `catch_up` answers it."""

    first: Skipped | None
    """Why the gap's first occurrence does not run; None when it runs."""
    skipped: tuple[Skipped, ...]
    """The gap's occurrences that do not run, the newest `MAX_SKIPPED_ROWS` (the first
    included, when among them), oldest first: the rows to record."""
    runs: tuple[Occurrence, ...]
    """The gap's occurrences that run, oldest first (`MAX_CATCH_UP_RUNS` at most)."""
    resume: Occurrence | None
    """The row to schedule: the first of `runs`, or the first occurrence after the gap."""


def catch_up(
    job_id: uuid.UUID, spec: JobSpec, *, after: datetime, now: datetime, paused: bool = False
) -> CatchUp:
    """What runs of a cron job's occurrences after `after` that are due by `now` less
    `CATCH_UP_GRACE`: the gap. Its newest occurrence is not missed (no later one is due
    yet), the others are.

    A gap of one occurrence is ordinary lateness and it runs (within the window), unless
    `paused` (the job was paused during the whole gap: every occurrence of it was missed).
    Otherwise the policy says: `Skip` none; `Latest` the newest; `All` all of them, the
    newest `MAX_CATCH_UP_RUNS` at most. And only those due within the window before `now`.
    The scheduler calls it for an overdue pending row (`after` just before its occurrence),
    `resume_job` for a pause (`after` the pause's start).

    The cost does not grow with the gap: its newest occurrences are found walking back from
    `now` (`latest_fire_times`); an older one is never looked at, and leaves no row."""
    assert spec.cron is not None
    offset = jitter_offset(job_id, spec.jitter_seconds)
    cutoff = now - CATCH_UP_GRACE
    newest = latest_fire_times(
        spec.cron,
        spec.time_zone,
        after=after,
        until=cutoff - offset,
        # (the runs, at most one unless All, and the skipped occurrences recorded before them)
        count=(MAX_CATCH_UP_RUNS if spec.catch_up == CatchUpPolicy.ALL else 1) + MAX_SKIPPED_ROWS,
    )
    gap = [Occurrence(fire, fire + offset) for fire in newest]
    if not gap:
        return CatchUp(None, (), (), next_occurrence(job_id, spec, after))
    window = spec.catch_up_window_seconds
    since = now - timedelta(seconds=window) if window is not None else None
    lone = len(gap) == 1 and not paused
    if lone or spec.catch_up == CatchUpPolicy.ALL:
        chosen = gap[-MAX_CATCH_UP_RUNS:]
    elif spec.catch_up == CatchUpPolicy.LATEST:
        chosen = gap[-1:]
    else:
        chosen = []
    runs = [o for o in chosen if since is None or o.due_at >= since]

    def why(o: Occurrence) -> str:
        if spec.catch_up == CatchUpPolicy.SKIP and not lone:
            reason = "catch-up policy Skip: a missed occurrence does not run"
        elif spec.catch_up == CatchUpPolicy.LATEST and o != gap[-1]:
            reason = "catch-up policy Latest: only the latest missed occurrence runs"
        elif since is not None and o.due_at < since:
            late = int((now - o.due_at).total_seconds())
            reason = (
                f"outside the catch-up window of {format_duration(window or 0)}"
                f" ({format_duration(late)} late)"
            )
        else:
            reason = f"beyond the catch-up cap: at most {MAX_CATCH_UP_RUNS} missed occurrences run"
        return f"job was paused at this time; {reason}" if paused else reason

    missed = gap[: len(gap) - len(runs)]
    skipped = tuple(Skipped(o, why(o)) for o in missed[-MAX_SKIPPED_ROWS:])
    first = None
    if missed:
        oldest = next_occurrence(job_id, spec, after)
        assert oldest is not None  # the gap is not empty
        first = Skipped(oldest, why(oldest))
    resume = runs[0] if runs else next_occurrence(job_id, spec, gap[-1].occurrence_at)
    return CatchUp(first, skipped, tuple(runs), resume)


def fire_times_between(
    cron: str, time_zone: str, *, after: datetime, before: datetime, limit: int
) -> list[datetime]:
    """At most `limit` nominal fire times of `cron` in (`after`, `before`), ascending (a
    backfill's next slice)."""
    times: list[datetime] = []
    for fire in cron_times(cron, time_zone, after):
        if fire >= before or len(times) >= limit:
            break
        times.append(fire)
    return times

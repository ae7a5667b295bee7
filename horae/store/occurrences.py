"""Occurrence arithmetic, pure: when a job fires next, first, and what a resumed job
missed. No I/O: the store's writes call these and insert what they answer."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from horae.models import CatchUpPolicy, JobSpec
from horae.schedule import count_fire_times as count_fire_times
from horae.schedule import (
    cron_times,
    fires_per_minute,
    jitter_offset,
    latest_fire_times,
    next_fire_times,
)

MAX_SKIPPED_ON_RESUME = 100
"""Missed occurrences recorded as `skipped` when a paused job resumes: the most recent this
many (after the one catch-up `Latest` runs); older ones leave no row."""


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


def missed_on_resume(
    spec: JobSpec, since: datetime, now: datetime
) -> tuple[list[datetime], datetime | None]:
    """A cron job paused since `since` and resumed at `now`: the missed occurrences to
    record `skipped` (the most recent `MAX_SKIPPED_ON_RESUME`), and the one to run now
    (catch-up `Latest`: the most recent), if any."""
    assert spec.cron is not None
    # The latest missed occurrences only, found from `now` backwards: the cost does not
    # grow with the pause (a year of a every-second job is 31.5 M occurrences).
    missed = latest_fire_times(
        spec.cron, spec.time_zone, after=since, until=now, count=MAX_SKIPPED_ON_RESUME + 1
    )
    run_now = missed.pop() if missed and spec.catch_up == CatchUpPolicy.LATEST else None
    return missed[-MAX_SKIPPED_ON_RESUME:], run_now


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

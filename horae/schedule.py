"""Fire times of a job: a one-off `run_at`, or a cron expression in a time zone.

Cron follows Debian cron's rules around DST: a fixed-time job skipped by
spring-forward runs once right after the jump, one repeated by fall-back runs
once, and jobs with `*` (or `*/n`) in the minute or hour field follow real time.
`cronsim` parses and walks wall-clock times; this module places them on the time
line, so the rules hold for 6-field expressions and half-hour shifts too. Five
fields, or six with seconds first; macros (`@hourly`, `@daily`, ...); `L` and `#`
in the day fields.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from horae.domain.instants import LATEST_INSTANT

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def _expand(expression: str) -> str:
    expr = " ".join(expression.split())
    return MACROS.get(expr.lower(), expr)


def validate_cron(expression: str) -> None:
    """Raise ValueError with a readable reason when `expression` is not valid cron."""
    expr = _expand(expression)
    if len(expr.split(" ")) not in (5, 6):
        raise ValueError(f"cron {expression!r} must have 5 fields (6 with seconds first)")
    try:
        CronSim(expr, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise ValueError(f"invalid cron {expression!r}: {exc}") from None


def jitter_offset(job_id: uuid.UUID, jitter_seconds: int) -> timedelta:
    """Stable per-job offset in [0, jitter_seconds): the same for every occurrence."""
    if jitter_seconds <= 0:
        return timedelta(0)
    digest = hashlib.blake2b(job_id.bytes, digest_size=8).digest()
    millis = int.from_bytes(digest, "big") % (jitter_seconds * 1000)
    return timedelta(milliseconds=millis)


_LARGEST_SHIFT = timedelta(hours=3)
"""More than any UTC offset change in the tz database (Antarctica/Troll's is 2 hours)."""


def _transition(zone: ZoneInfo, lo: datetime, hi: datetime) -> datetime:
    """The first instant in (lo, hi] (UTC) whose offset in `zone` differs from lo's."""
    before = lo.astimezone(zone).utcoffset()
    lo_s, hi_s = int(lo.timestamp()), int(hi.timestamp())
    while hi_s - lo_s > 1:
        mid = (lo_s + hi_s) // 2
        if datetime.fromtimestamp(mid, UTC).astimezone(zone).utcoffset() == before:
            lo_s = mid
        else:
            hi_s = mid
    return datetime.fromtimestamp(hi_s, UTC)


def _instants(wall: datetime, zone: ZoneInfo, real_time: bool) -> tuple[list[datetime], datetime]:
    """The instants (UTC) at which the naive wall-clock time `wall` fires in `zone`, and a
    lower bound for the instants of every later wall time.

    A wall time that exists once fires once. One that fall-back repeats fires at both
    instants in real time, else only at the first. One that spring-forward skips never
    fires in real time, else fires once, at the jump.
    """
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first == second:
        return [first], first
    exists = first.astimezone(zone).replace(tzinfo=None) == wall
    if exists:  # repeated: fold 0 is the earlier instant
        return ([first, second] if real_time else [first]), first
    jump = _transition(zone, min(first, second), max(first, second))
    return ([] if real_time else [jump]), jump


def _follows_real_time(expression: str) -> bool:
    """Debian cron's rule: `*` (or `*/n`) in the minute or hour field means real time."""
    fields = expression.split(" ")
    minute, hour = fields[-5], fields[-4]
    return minute.startswith("*") or hour.startswith("*")


def cron_times(expression: str, time_zone: str, after: datetime) -> Iterator[datetime]:
    """Fire times (UTC, strictly increasing) of `expression` strictly after `after`.

    `cronsim` walks the naive wall-clock times that match; `_instants` places each
    on the time line by Debian cron's DST rules (for 6-field expressions too, and at
    half-hour shifts such as Lord Howe's). Wall times can map out of order around a
    fall-back, so fire times wait in a heap until no later wall time can come before.
    """
    expr = _expand(expression)
    zone = ZoneInfo(time_zone)
    real_time = _follows_real_time(expr)
    start = after.astimezone(zone).replace(tzinfo=None)
    ahead = after + _LARGEST_SHIFT
    if real_time and ahead.astimezone(zone).utcoffset() != after.astimezone(zone).utcoffset():
        # A fall-back ahead repeats wall times from before `after`'s: their second
        # instants still lie ahead (a fixed-time job runs only at the first).
        # (CronSim yields wall times strictly after its start: start just before the shift,
        # or the first repeated wall time, the shift itself, would be lost.)
        shift = _transition(zone, after, ahead).astimezone(zone).replace(tzinfo=None)
        start = min(start, shift - timedelta(seconds=1))
    waiting: list[datetime] = []
    last = after
    for wall in CronSim(expr, start):
        fires, bound = _instants(wall, zone, real_time)
        while waiting and waiting[0] < bound:
            fire = heapq.heappop(waiting)
            if fire > last:
                last = fire
                yield fire
        for fire in fires:
            if fire > last:
                heapq.heappush(waiting, fire)


def _steady(zone: ZoneInfo, lo: datetime, hi: datetime) -> bool:
    """Whether `zone`'s UTC offset is the same all over [lo, hi] (a day at most: no zone
    changes its offset twice within a day, so equal ends mean no change between)."""
    return (
        hi - lo <= timedelta(days=1)
        and lo.astimezone(zone).utcoffset() == hi.astimezone(zone).utcoffset()
    )


def latest_fire_times(
    expression: str, time_zone: str, *, after: datetime, until: datetime, count: int
) -> list[datetime]:
    """The latest `count` fire times in (`after`, `until`], ascending, at a cost bounded by
    `count` plus the fire times of a few hours: never by how far back `after` lies.

    Walking back from `until` in wall-clock time (`cronsim`'s reverse mode) finds the
    `count`-th latest matching wall time; `cron_times` then walks forward from there, less
    `_LARGEST_SHIFT` when the zone's offset changes near that stretch (wall times and
    instants are then not in the same order, and the forward walk applies Debian cron's
    rules there), and keeps the latest `count`.
    """
    if count <= 0 or until <= after:
        return []
    expr = _expand(expression)
    zone = ZoneInfo(time_zone)
    # Where the zone's offset is the same hours around `until`, wall times after until's are
    # instants after it: the walk back starts there, not `_LARGEST_SHIFT` ahead (a thousand
    # wall times of an every-10-seconds job).
    steady = _steady(zone, until - _LARGEST_SHIFT, until + _LARGEST_SHIFT)
    ahead = until + (timedelta(seconds=1) if steady else _LARGEST_SHIFT)
    top = ahead.astimezone(zone).replace(tzinfo=None)
    walls = CronSim(expr, top, reverse=True)
    start = after
    seen = 0
    for wall in walls:
        instant = wall.replace(tzinfo=zone).astimezone(UTC)
        if instant <= after:
            break
        if instant <= until:
            seen += 1
        if seen >= count:
            start = max(after, instant - timedelta(microseconds=1))
            if not _steady(zone, instant - _LARGEST_SHIFT, until + _LARGEST_SHIFT):
                start = max(after, instant - _LARGEST_SHIFT)
            break
    latest: list[datetime] = []
    for fire in cron_times(expr, time_zone, start):
        if fire > until:
            break
        latest.append(fire)
        if len(latest) > 2 * count:  # keep the tail only: memory stays O(count)
            del latest[:count]
    return latest[-count:]


RATE_SAMPLE = 50
"""Fire times looked at to find a cron job's shortest gap (`fires_per_minute`)."""
_RATE_FROM = datetime(2001, 1, 1, tzinfo=UTC)


@functools.lru_cache(maxsize=1024)
def fires_per_minute(cron: str | None, time_zone: str = "UTC") -> float:
    """A job's fire rate as tenant quotas count it: its densest, 60 s divided by the
    shortest gap between consecutive fire times among its first `RATE_SAMPLE` from
    2001-01-01 in its time zone (`* * * * * *` 60, `*/5 * * * *` 0.2, `@daily` 1/1440).
    A one-off (no cron) counts 1: any number of them may be due in the same minute."""
    if cron is None:
        return 1.0
    fires = list(islice(cron_times(cron, time_zone, _RATE_FROM), RATE_SAMPLE))
    gaps = [(b - a).total_seconds() for a, b in pairwise(fires)]
    return 60.0 / min(gaps) if gaps else 1.0


def next_fire_times(
    *, run_at: datetime | None, cron: str | None, time_zone: str, after: datetime, count: int
) -> list[datetime]:
    """The next `count` nominal fire times after `after` (a one-off has at most one)."""
    if run_at is not None:
        return [run_at] if run_at > after else []
    assert cron is not None
    # A rare schedule (29 February on a Monday) walked from a late `after` would run off
    # the calendar: the times end at LATEST_INSTANT instead of raising OverflowError.
    times: list[datetime] = []
    try:
        for fire in islice(cron_times(cron, time_zone, after), count):
            if fire >= LATEST_INSTANT:
                break
            times.append(fire)
    except OverflowError:
        pass
    return times


UNIFORM_ZONES = frozenset({"UTC", "Etc/UTC", "Etc/Universal", "Etc/Zulu", "GMT", "Etc/GMT"})
"""Zones whose UTC offset never changes: their wall times are the time line, shifted."""


def count_fire_times(expression: str, time_zone: str, *, start: datetime, before: datetime,
                     cap: int) -> int:  # fmt: skip
    """How many fire times of `expression` lie in [`start`, `before`), counted up to
    `cap + 1` (a backfill's total: a longer range is refused, never counted to its end).
    In a zone without offset changes the wall times are counted as `cronsim` yields them,
    five times as fast as placing each on the time line (`cron_times`): a million in about
    a second."""
    n = 0
    if time_zone in UNIFORM_ZONES:
        # Wall times are UTC instants: from the whole second at or before `start`.
        first = start.astimezone(UTC).replace(tzinfo=None)
        end = before.astimezone(UTC).replace(tzinfo=None)
        for wall in CronSim(
            _expand(expression), first.replace(microsecond=0) - timedelta(seconds=1)
        ):
            if wall >= end or n > cap:
                break
            if wall >= first:
                n += 1
        return n
    for fire in cron_times(expression, time_zone, start - timedelta(microseconds=1)):
        if fire >= before or n > cap:
            break
        n += 1
    return n

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

import hashlib
import heapq
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import islice
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

EARLIEST_INSTANT = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_INSTANT = datetime(9000, 1, 1, tzinfo=UTC)
"""Every instant a caller gives (a job's `run_at`, a preview's `after`) lies in
[EARLIEST_INSTANT, LATEST_INSTANT): a fixed bound, because the CRD's CEL rules have no
clock, and far enough from `datetime.max` (9999-12-31) that everything added to an
instant (jitter, retry delays, starting deadlines, time-zone offsets, the cron walk of a
preview) stays representable instead of raising OverflowError."""


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

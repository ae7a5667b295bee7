"""Fire times of a job: a one-off `run_at`, or a cron expression in a time zone.

Cron follows Debian cron's rules around DST, as implemented by `cronsim`:
a fixed-time job skipped by spring-forward runs once right after the jump, one
repeated by fall-back runs once, and jobs with `*` or a step in the minute or
hour field follow real time. Five fields, or six with seconds first; macros
(`@hourly`, `@daily`, ...); `L` and `#` in the day fields.
"""

from __future__ import annotations

import hashlib
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


def cron_times(expression: str, time_zone: str, after: datetime) -> Iterator[datetime]:
    """Fire times (UTC, strictly increasing) of `expression` strictly after `after`."""
    zone = ZoneInfo(time_zone)
    start = after.astimezone(zone)
    last: datetime | None = None
    for local in CronSim(_expand(expression), start):
        fire = local.astimezone(UTC)
        if fire <= after or (last is not None and fire <= last):
            continue
        last = fire
        yield fire


def next_fire_times(
    *, run_at: datetime | None, cron: str | None, time_zone: str, after: datetime, count: int
) -> list[datetime]:
    """The next `count` nominal fire times after `after` (a one-off has at most one)."""
    if run_at is not None:
        return [run_at] if run_at > after else []
    assert cron is not None
    return list(islice(cron_times(cron, time_zone, after), count))

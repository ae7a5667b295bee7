"""The rules of a backfill (a past range of a cron job's occurrences run now), checked by
the API, the CLI and the operator alike; each entry point spells the field its own way
(`from` in the API, `--from` on the command line, `spec.from` for a Backfill).

A backfill runs the occurrences in [from, to): both in the past (`to` at most now), at
most `MAX_OCCURRENCES` of them, fed at `rate` a second (1 to `MAX_RATE`, default
`DEFAULT_RATE`). `overlap` says how its runs overlap one another: `Allow` (in parallel,
bounded by the rate) or `Forbid` (one at a time: the next is fed once the previous ended).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from horae.errors import HoraeError

MAX_OCCURRENCES = 1_000_000
"""The most occurrences one backfill may hold (a year of `* * * * *` is 525,600)."""
DEFAULT_RATE = 10
"""Occurrences fed a second when the request names no rate."""
MAX_RATE = 1000
"""The highest rate (occurrences a second); the lowest is 1."""


class Overlap(StrEnum):
    """How a backfill's runs overlap one another (never the job's scheduled runs: those
    neither skip nor replace backfilled ones, nor the other way round)."""

    ALLOW = "Allow"
    FORBID = "Forbid"


class BackfillState(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


class InvalidBackfill(HoraeError):
    """A backfill request that breaks a rule: `field` names the input to fix (`from`, `to`,
    `rate`), each entry point spelling it its own way."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def check_range(from_at: datetime, to_at: datetime, now: datetime) -> None:
    """Raise InvalidBackfill unless [from_at, to_at) is a non-empty range in the past."""
    if from_at.tzinfo is None or to_at.tzinfo is None:
        bad = "from" if from_at.tzinfo is None else "to"
        raise InvalidBackfill(bad, f"{bad} needs a time zone offset (e.g. Z or +02:00)")
    if from_at >= to_at:
        raise InvalidBackfill(
            "to", f"to ({to_at.isoformat()}) must be after from ({from_at.isoformat()})"
        )
    if to_at > now:
        raise InvalidBackfill(
            "to",
            f"to ({to_at.isoformat()}) is in the future: a backfill runs past occurrences "
            f"only (the schedule runs the coming ones)",
        )


def check_rate(rate: int) -> None:
    if not 1 <= rate <= MAX_RATE:
        raise InvalidBackfill("rate", f"rate must be 1 to {MAX_RATE} occurrences a second")


def check_total(total: int) -> None:
    """Raise InvalidBackfill when the range holds no occurrence, or too many."""
    if total == 0:
        raise InvalidBackfill("from", "the range holds no occurrence of the job's schedule")
    if total > MAX_OCCURRENCES:
        raise InvalidBackfill(
            "to",
            f"the range holds more than {MAX_OCCURRENCES:,} occurrences of the job's "
            f"schedule: split it into several backfills",
        )

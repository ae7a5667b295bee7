"""Instants: the range every instant a caller gives must lie in, and how instants are
written where Kubernetes shows them."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import overload

EARLIEST_INSTANT = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_INSTANT = datetime(9000, 1, 1, tzinfo=UTC)
"""Every instant a caller gives (a job's `run_at`, a preview's `after`) lies in
[EARLIEST_INSTANT, LATEST_INSTANT): a fixed bound, because the CRD's CEL rules have no
clock, and far enough from `datetime.max` (9999-12-31) that everything added to an
instant (jitter, retry delays, starting deadlines, time-zone offsets, the cron walk of a
preview) stays representable instead of raising OverflowError."""


@overload
def rfc3339(value: datetime) -> str: ...
@overload
def rfc3339(value: datetime | None) -> str | None: ...
def rfc3339(value: datetime | None) -> str | None:
    """`value` in UTC to the second, as Kubernetes writes times (`2030-01-01T09:00:00Z`);
    None stays None (a status field with no time yet)."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if value else None


def check_instant(value: datetime) -> datetime:
    """`value` in UTC, when it has a UTC offset and lies within [EARLIEST_INSTANT,
    LATEST_INSTANT); ValueError otherwise. Compared before any conversion, which could
    overflow."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("needs a UTC offset, e.g. 2030-01-01T09:00:00Z")
    if not EARLIEST_INSTANT <= value < LATEST_INSTANT:
        raise ValueError(
            f"must be from {rfc3339(EARLIEST_INSTANT)} to before {rfc3339(LATEST_INSTANT)}"
        )
    return value.astimezone(UTC)


_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})", re.IGNORECASE
)


def parse_rfc3339(text: str) -> datetime:
    """`text` as an RFC 3339 instant (`2026-12-02T10:00:00Z`; a UTC offset, a fraction of a
    second) in UTC, within the bounds of `check_instant`; ValueError saying what is wrong."""
    if _RFC3339.fullmatch(text) is None:
        raise ValueError(
            f"not an RFC 3339 instant with a UTC offset (e.g. 2026-12-02T10:00:00Z): {text!r}"
        )
    try:
        value = datetime.fromisoformat(text.upper())
    except ValueError:
        raise ValueError(f"not a valid date and time: {text!r}") from None
    return check_instant(value)

"""The limits of a job: the bounds of its fields, and the checks no field bound can state.

The numbers are read by `horae.models` (JobSpec, RetryPolicy, the API's bodies) and by
`horae.crd_schemas` (the ScheduledJob CRD schema), so pydantic and the API server refuse the
same values. The checks are called by the API, the CLI and the operator alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from horae.domain.durations import format_duration, parse_duration

TASK_NAME_PATTERN = r"^[a-z0-9]([a-z0-9._-]{0,251}[a-z0-9])?$"
TASK_NAME_MAX_CHARS = 253
CRON_MAX_CHARS = 200
TIME_ZONE_MAX_CHARS = 64
MAX_JITTER_SECONDS = 3600
"""`jitter_seconds` is 0 to this."""
A_WEEK_SECONDS = 7 * 86400
"""The longest `timeout_seconds` and `starting_deadline_seconds` (both at least 1)."""


@dataclass(frozen=True)
class RetryLimits:
    """The largest value of each `RetryPolicy` field. The smallest: one attempt, and an
    interval above 0 (which the CRD schema, whose bounds are inclusive, writes as 0.001)."""

    max_attempts: int = 100
    initial_interval_seconds: int = 3600
    max_interval_seconds: int = 86400


RETRY_LIMITS = RetryLimits()

MAX_PAYLOAD_BYTES = 256 * 1024
"""A payload's size, serialized as compact JSON. CEL cannot measure it, so the CRD schema
does not state it: the operator refuses an oversized ScheduledJob itself."""

MAX_RESULT_BYTES = 64 * 1024
"""A handler's return value, serialized as compact JSON, is stored up to this size. A larger
one (or one JSON cannot represent) is not stored: the attempt still succeeds, and its
result is `RESULT_DROPPED_KEY`'s marker object saying why."""

RESULT_DROPPED_KEY = "horae.result_dropped"
"""The one key of the object stored instead of a result that could not be stored; its
value says why (`{"horae.result_dropped": "result is 70000 bytes of JSON; the limit is
65536"}`)."""

MAX_PAUSE_AFTER_FAILURES = 1000
"""`failure_policy.pause_after_consecutive_failures` is 1 to this."""

PAUSE_REASON_MAX_CHARS = 500
"""A pause reason a user gives (API, CLI, the `horae.dev/pause-reason` annotation)."""

DEFAULT_MAX_LATENESS = timedelta(hours=1)
"""A `run_at` this far in the past is refused when the job sets no starting deadline."""


def payload_size_error(payload: Any) -> str | None:
    """Why `payload` is too large to store (over MAX_PAYLOAD_BYTES serialized, or nested
    too deeply to serialize at all), or None."""
    try:
        size = len(json.dumps(payload, separators=(",", ":")).encode())
    except RecursionError:
        return "payload is nested too deeply to store"
    if size > MAX_PAYLOAD_BYTES:
        return f"payload is {size} bytes; the limit is {MAX_PAYLOAD_BYTES}"
    return None


def stored_result(value: Any) -> Any:
    """What is stored for a handler's return value `value`: itself when it is JSON that
    Postgres can store within MAX_RESULT_BYTES, else a marker object saying why not."""
    if value is None:
        return None
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        why = f"result is not JSON-serialisable ({type(exc).__name__}: {str(exc)[:200]})"
        return {RESULT_DROPPED_KEY: why}
    size = len(text.encode())
    if size > MAX_RESULT_BYTES:
        return {
            RESULT_DROPPED_KEY: f"result is {size} bytes of JSON; the limit is {MAX_RESULT_BYTES}"
        }
    stored = json.loads(text)  # what JSON makes of it: tuples become lists, keys strings
    if contains_nul(stored):
        return {RESULT_DROPPED_KEY: "result contains the NUL character, which cannot be stored"}
    return stored


def pause_reason_error(reason: str) -> str | None:
    """Why `reason` cannot be a job's pause reason (too long, or holding NUL), or None."""
    if len(reason) > PAUSE_REASON_MAX_CHARS:
        return f"is {len(reason)} characters; the limit is {PAUSE_REASON_MAX_CHARS}"
    if "\x00" in reason:
        return "cannot contain the NUL character (\\u0000)"
    return None


def lateness_error(
    run_at: datetime | None, *, starting_deadline_seconds: int | None, now: datetime
) -> str | None:
    """Why a new (or newly timed) job's `run_at` is too far in the past to run, or None:
    further back than its starting deadline, or DEFAULT_MAX_LATENESS without one. A little
    late is fine: it fires at once."""
    if run_at is None:
        return None
    allowed = (
        timedelta(seconds=starting_deadline_seconds)
        if starting_deadline_seconds
        else DEFAULT_MAX_LATENESS
    )
    if run_at >= now - allowed:
        return None
    return f"is more than {int(allowed.total_seconds())}s in the past (past its starting deadline)"


def contains_nul(value: Any) -> bool:
    """Whether a JSON value holds the NUL character in a string or a key: Postgres text and
    jsonb cannot store it, so it is refused at validation rather than failing at INSERT."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


CATCH_UP_GRACE = timedelta(seconds=5)
"""Lateness that is not a gap: an occurrence whose successor was due less than this before
the scheduler looks at it runs, whatever the catch-up policy (a failover or a load spike
makes a dispatch a few seconds late; that is not an outage)."""
MAX_CATCH_UP_RUNS = 100
"""The most occurrences of one gap that catch-up `All` replays: the newest this many (within
the window); the older ones are skipped ("beyond the catch-up cap")."""
MAX_SKIPPED_ROWS = 100
"""The skipped occurrences of one gap (an outage, a pause) that are recorded as `skipped`
rows: the newest this many; older ones leave no row."""
MAX_CATCH_UP_WINDOW_SECONDS = 31 * 86400
"""The longest catch-up window (31 days); the shortest is 1 second."""


def catch_up_window(text: str) -> int:
    """A catch-up window written as a duration (`1h30m`, as a ScheduledJob and the CLI take
    it) in seconds; ValueError when it is not a duration or not from 1s to 744h (31 days)."""
    seconds = parse_duration(text)
    if not 1 <= seconds <= MAX_CATCH_UP_WINDOW_SECONDS:
        raise ValueError(
            f"{text!r} is out of range: a catch-up window is from 1s to"
            f" {format_duration(MAX_CATCH_UP_WINDOW_SECONDS)} (31 days)"
        )
    return seconds

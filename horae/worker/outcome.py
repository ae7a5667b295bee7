"""Classify how a handler ended into one frozen outcome: succeeded, retry at, failed, dead.

One function decides, so every path (exception, timeout, unknown task) is
treated alike and is unit-testable without a broker or a database.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from horae.errors import PermanentError, RetryableError
from horae.models import ExecutionStatus, RetryPolicy


@dataclass(frozen=True)
class Outcome:
    status: ExecutionStatus
    error_kind: str | None = None
    error_message: str | None = None
    retry_at: datetime | None = None
    result: Any = None
    """A success's stored result (`limits.stored_result` of what the handler returned)."""


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, RetryableError | TimeoutError | ConnectionError):
        return True
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status is None:
        status = getattr(exc, "status", None)
    return isinstance(status, int) and (status == 429 or 500 <= status <= 599)


def classify(
    exc: BaseException | None,
    *,
    attempt: int,
    policy: Callable[[], RetryPolicy],
    now: datetime,
    rand: Callable[[float, float], float] = random.uniform,
) -> Outcome:
    """The outcome of attempt `attempt` that ended with `exc` (None: success). `policy` is
    called only for a failure that may be retried: most attempts need no policy, and a
    worker then never parses one."""
    if exc is None:
        return Outcome(ExecutionStatus.SUCCEEDED)
    timed_out = isinstance(exc, asyncio.TimeoutError | TimeoutError) and not isinstance(
        exc, RetryableError
    )
    kind = "timeout" if timed_out else type(exc).__name__
    message = str(exc)[:2000] or kind
    if isinstance(exc, PermanentError) or not _retryable(exc):
        return Outcome(ExecutionStatus.FAILED, kind, message)
    status = ExecutionStatus.TIMED_OUT if timed_out else ExecutionStatus.FAILED
    retry = policy()
    if attempt >= retry.max_attempts:
        return Outcome(ExecutionStatus.DEAD, kind, f"{message} (attempt {attempt} of {attempt})")
    delay = exc.delay if isinstance(exc, RetryableError) and exc.delay is not None else None
    return Outcome(status, kind, message, now + (delay or retry.delay(attempt, rand=rand)))

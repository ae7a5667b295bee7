"""The vocabulary shared by every component: job specs, retry policy, statuses.

Pure data and validation; no I/O. The API, the operator (through the CRD) and
the store all speak these types.
"""

from __future__ import annotations

import enum
import random
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Annotated, Any, NewType
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from horae.domain.instants import check_instant
from horae.domain.limits import (
    A_WEEK_SECONDS,
    CRON_MAX_CHARS,
    MAX_CATCH_UP_WINDOW_SECONDS,
    MAX_JITTER_SECONDS,
    MAX_PAUSE_AFTER_FAILURES,
    RETRY_LIMITS,
    TASK_NAME_MAX_CHARS,
    TASK_NAME_PATTERN,
    TIME_ZONE_MAX_CHARS,
    contains_nul,
)

JobId = NewType("JobId", uuid.UUID)
ExecutionId = NewType("ExecutionId", uuid.UUID)
Shard = NewType("Shard", int)

# The bounds of a spec's fields (horae.domain.limits), shared with the API's edit body so
# that its document states them too.
TaskName = Annotated[
    str, Field(min_length=1, max_length=TASK_NAME_MAX_CHARS, pattern=TASK_NAME_PATTERN)
]
CronText = Annotated[str, Field(min_length=1, max_length=CRON_MAX_CHARS)]
TimeZoneName = Annotated[str, Field(min_length=1, max_length=TIME_ZONE_MAX_CHARS)]
JitterSeconds = Annotated[int, Field(ge=0, le=MAX_JITTER_SECONDS)]
UpToAWeek = Annotated[int, Field(ge=1, le=A_WEEK_SECONDS)]
CatchUpWindowSeconds = Annotated[
    int,
    Field(
        ge=1,
        le=MAX_CATCH_UP_WINDOW_SECONDS,
        description="How far back a missed occurrence is still caught up (seconds, up to 31"
        " days); null: no limit.",
    ),
]


class ExecutionStatus(enum.StrEnum):
    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    DEAD = "dead"

    @property
    def terminal(self) -> bool:
        return self not in (
            ExecutionStatus.SCHEDULED,
            ExecutionStatus.QUEUED,
            ExecutionStatus.RUNNING,
        )


class JobState(enum.StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    CANCELLED = "cancelled"
    COMPLETED = "completed"


class ConcurrencyPolicy(enum.StrEnum):
    """What an occurrence due while an earlier one of its job still runs does (its first
    attempt; a retry always runs)."""

    ALLOW = "Allow"
    """Runs beside it."""
    FORBID = "Forbid"
    """Is skipped (`forbid`)."""
    REPLACE = "Replace"
    """Runs; the earlier one is cancelled (the worker running it is told at once)."""
    BUFFER_ONE = "BufferOne"
    """Waits (still `scheduled`) until the earlier one ends, then runs; one occurrence waits
    at most, and one due while another waits is skipped (`buffer_one`)."""


class CatchUpPolicy(enum.StrEnum):
    """What runs of the occurrences a cron job missed in a gap (the scheduler away for more
    than 5 s, a pause), within `catch_up_window_seconds`: `Skip` none, `Latest` the most
    recent, `All` every one (the newest 100 at most). Each one not run is recorded as a
    skipped execution with the reason."""

    SKIP = "Skip"
    """None of them: go on from the first occurrence after the gap."""
    LATEST = "Latest"
    """The most recent (if within the window), as a CronJob does."""
    ALL = "All"
    """Every one within the window, the newest `MAX_CATCH_UP_RUNS` at most, oldest first."""


class JobSource(enum.StrEnum):
    CRD = "crd"
    API = "api"


def shard_of(job_id: uuid.UUID, shards: int) -> Shard:
    """Stable shard of a job: the uuid's integer value mod the shard count."""
    return Shard(job_id.int % shards)


class RetryPolicy(BaseModel):
    """How failed attempts are retried: full-jitter exponential backoff.

    The delay before attempt n+1 is uniform in [0, min(initial · 2^(n-1), max)].
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(default=5, ge=1, le=RETRY_LIMITS.max_attempts)
    initial_interval_seconds: float = Field(
        default=1.0, gt=0, le=RETRY_LIMITS.initial_interval_seconds
    )
    max_interval_seconds: float = Field(default=300.0, gt=0, le=RETRY_LIMITS.max_interval_seconds)

    @model_validator(mode="after")
    def _max_not_below_initial(self) -> RetryPolicy:
        if self.max_interval_seconds < self.initial_interval_seconds:
            raise ValueError("max_interval_seconds must be >= initial_interval_seconds")
        return self

    def backoff_cap(self, attempt: int) -> timedelta:
        """Upper bound of the delay after failed attempt `attempt` (1-based)."""
        exponent = min(attempt - 1, 62)
        cap = min(self.initial_interval_seconds * 2.0**exponent, self.max_interval_seconds)
        return timedelta(seconds=cap)

    def delay(
        self, attempt: int, *, rand: Callable[[float, float], float] = random.uniform
    ) -> timedelta:
        """Full-jitter delay after failed attempt `attempt`; `rand` is injectable for tests."""
        return timedelta(seconds=rand(0.0, self.backoff_cap(attempt).total_seconds()))


class FailurePolicy(BaseModel):
    """What a job does when its runs keep failing: after `pause_after_consecutive_failures`
    executions in a row ended failed, timed out or dead (each counted once, when no retry
    follows it; a success resets the count), the job is paused, saying why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pause_after_consecutive_failures: int = Field(ge=1, le=MAX_PAUSE_AFTER_FAILURES)


def _check_time_zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {value!r}: use an IANA name such as Europe/Paris"
        ) from None
    return value


class JobSpec(BaseModel):
    """What to run and when: the store's and the API's view of a job."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: TaskName
    payload: dict[str, Any] = Field(default_factory=dict)
    run_at: datetime | None = None
    cron: CronText | None = None
    time_zone: TimeZoneName = "UTC"
    jitter_seconds: JitterSeconds = 0
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    timeout_seconds: UpToAWeek | None = None
    concurrency_policy: ConcurrencyPolicy = ConcurrencyPolicy.ALLOW
    starting_deadline_seconds: UpToAWeek | None = None
    catch_up: CatchUpPolicy = CatchUpPolicy.LATEST
    catch_up_window_seconds: CatchUpWindowSeconds | None = None
    failure_policy: FailurePolicy | None = None

    @field_validator("time_zone")
    @classmethod
    def _time_zone_known(cls, value: str) -> str:
        return _check_time_zone(value)

    @field_validator("payload")
    @classmethod
    def _payload_storable(cls, value: dict[str, Any]) -> dict[str, Any]:
        if contains_nul(value):
            raise ValueError("strings and keys cannot contain the NUL character (\\u0000)")
        return value

    @field_validator("run_at")
    @classmethod
    def _run_at_bounded(cls, value: datetime | None) -> datetime | None:
        return check_instant(value) if value is not None else None

    @field_validator("cron")
    @classmethod
    def _cron_valid(cls, value: str | None) -> str | None:
        if value is not None:
            from horae.schedule import validate_cron

            validate_cron(value)
        return value

    @model_validator(mode="after")
    def _exactly_one_schedule(self) -> JobSpec:
        if (self.run_at is None) == (self.cron is None):
            raise ValueError("exactly one of run_at and cron is required")
        return self


class ExecutionBatch(BaseModel):
    """The body of a dispatch message: executions of one task, published together so that
    a top-of-the-hour spike is a few hundred messages rather than tens of thousands."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    executions: list[ExecutionMessage] = Field(min_length=1, max_length=1000)


class ExecutionMessage(BaseModel):
    """The body of a dispatch message. The payload is read at claim time, not carried."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    execution_id: uuid.UUID
    job_id: uuid.UUID
    task: str = Field(min_length=1, max_length=253)
    tenant: str = Field(min_length=1, max_length=253)
    due_at: datetime
    occurrence_at: datetime
    attempt: int = Field(ge=1, le=1_000_000)

    @field_validator("task", "tenant")
    @classmethod
    def _storable(cls, value: str) -> str:
        if contains_nul(value):
            raise ValueError("cannot contain the NUL character")
        return value


class CancelRunning(BaseModel):
    """The body of a control message to one worker: stop the handlers of these executions
    now (their rows are already marked `cancel_requested`, which the worker's next
    heartbeat would also find)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    execution_ids: list[uuid.UUID] = Field(min_length=1, max_length=1000)

"""The vocabulary shared by every component: job specs, retry policy, statuses.

Pure data and validation; no I/O. The API, the operator (through the CRD) and
the store all speak these types.
"""

from __future__ import annotations

import enum
import json
import random
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, NewType
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from horae.schedule import EARLIEST_INSTANT, LATEST_INSTANT

JobId = NewType("JobId", uuid.UUID)
ExecutionId = NewType("ExecutionId", uuid.UUID)
Shard = NewType("Shard", int)

TASK_NAME_PATTERN = r"^[a-z0-9]([a-z0-9._-]{0,251}[a-z0-9])?$"
MAX_PAYLOAD_BYTES = 256 * 1024


# The bounds of a spec's fields, shared with the API's edit body so that its document
# states them too.
TaskName = Annotated[str, Field(min_length=1, max_length=253, pattern=TASK_NAME_PATTERN)]
CronText = Annotated[str, Field(min_length=1, max_length=200)]
TimeZoneName = Annotated[str, Field(min_length=1, max_length=64)]
JitterSeconds = Annotated[int, Field(ge=0, le=3600)]
UpToAWeek = Annotated[int, Field(ge=1, le=7 * 86400)]


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
    ALLOW = "Allow"
    FORBID = "Forbid"
    REPLACE = "Replace"


class CatchUpPolicy(enum.StrEnum):
    """What resuming a paused job does about the occurrences it missed."""

    SKIP = "Skip"
    """Record them as `skipped` (reason: paused) and go on from now."""
    LATEST = "Latest"
    """Run the most recent missed occurrence now; record the others as skipped."""


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

    max_attempts: int = Field(default=5, ge=1, le=100)
    initial_interval_seconds: float = Field(default=1.0, gt=0, le=3600)
    max_interval_seconds: float = Field(default=300.0, gt=0, le=86400)

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


def payload_size_error(payload: Any) -> str | None:
    """Why `payload` is too large to store (over MAX_PAYLOAD_BYTES serialized, or nested
    too deeply to serialize at all), or None. The one rule of the API, the CLI and the
    operator."""
    try:
        size = len(json.dumps(payload, separators=(",", ":")).encode())
    except RecursionError:
        return "payload is nested too deeply to store"
    if size > MAX_PAYLOAD_BYTES:
        return f"payload is {size} bytes; the limit is {MAX_PAYLOAD_BYTES}"
    return None


def check_instant(value: datetime) -> datetime:
    """`value` in UTC, when it has a UTC offset and lies within [EARLIEST_INSTANT,
    LATEST_INSTANT); ValueError otherwise. Compared before any conversion, which could
    overflow."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("needs a UTC offset, e.g. 2030-01-01T09:00:00Z")
    if not EARLIEST_INSTANT <= value < LATEST_INSTANT:
        raise ValueError(
            f"must be from {EARLIEST_INSTANT:%Y-%m-%dT%H:%M:%SZ} to before "
            f"{LATEST_INSTANT:%Y-%m-%dT%H:%M:%SZ}"
        )
    return value.astimezone(UTC)


def _check_time_zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {value!r}: use an IANA name such as Europe/Paris"
        ) from None
    return value


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
    catch_up: CatchUpPolicy = CatchUpPolicy.SKIP

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

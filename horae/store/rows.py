"""What the store's reads answer: frozen rows, never the driver's records.

Each row type names the columns its queries select; `*_of(record)` builds one. (The hot
paths' rows, `executions.Due` and `executions.Claimed`, sit beside their queries.)
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from horae.models import (
    CatchUpPolicy,
    ConcurrencyPolicy,
    ExecutionStatus,
    FailurePolicy,
    JobSource,
    JobSpec,
    JobState,
)

if TYPE_CHECKING:
    import asyncpg


IMPLIED_RETRY_POLICY: Final[dict[str, Any]] = {
    "max_attempts": 5,
    "initial_interval_seconds": 1.0,
    "max_interval_seconds": 300.0,
}
"""The retry policy's fields a `jobs.retry_policy` leaves out stand for (migration 023):
fixed for as long as such rows exist, whatever the model's defaults become. They are the
model's defaults of every release so far, so an older release reads the same policy."""


def stored_retry_policy(policy: dict[str, Any]) -> dict[str, Any]:
    """What `jobs.retry_policy` stores for `policy` (a `RetryPolicy`'s dump): the fields
    that differ from the implied policy, `{}` for that policy itself (8 bytes, not 112)."""
    return {k: v for k, v in policy.items() if IMPLIED_RETRY_POLICY.get(k) != v}


def retry_policy_of(stored: dict[str, Any]) -> dict[str, Any]:
    """The retry policy a `jobs.retry_policy` value stores, every field given."""
    return {**IMPLIED_RETRY_POLICY, **stored}


@dataclass(frozen=True, slots=True)
class JobRow:
    """A job as stored (`jobs`)."""

    id: uuid.UUID
    tenant: str
    name: str | None
    source: JobSource
    task: str
    payload: dict[str, Any]
    run_at: datetime | None
    cron: str | None
    time_zone: str
    jitter_seconds: int
    retry_policy: dict[str, Any]
    timeout_seconds: int | None
    concurrency_policy: ConcurrencyPolicy
    starting_deadline_seconds: int | None
    catch_up: CatchUpPolicy
    catch_up_window_seconds: int | None
    state: JobState
    paused_at: datetime | None
    spec_version: int
    shard: int
    next_run_at: datetime | None
    last_run_at: datetime | None
    last_status: ExecutionStatus | None
    idempotency_key: str | None
    request_hash: str | None
    created_at: datetime
    updated_at: datetime
    fires_per_minute: float
    manual_trigger: str | None
    """A ScheduledJob's job: the last `horae.dev/trigger` annotation value it ran."""
    pause_after_failures: int | None
    """Its failure policy: paused after this many consecutive failed executions."""
    consecutive_failures: int
    """Its executions that ended failed, timed out or dead since its last success."""
    paused_reason: str | None
    """Why it is paused: the reason a user gave, or the failures that paused it."""
    paused_for_failures: bool
    """Paused by its failure policy (not by a user)."""

    @property
    def spec(self) -> JobSpec:
        """The job's spec, as it was created or last edited."""
        return JobSpec(
            task=self.task,
            payload=self.payload,
            run_at=self.run_at,
            cron=self.cron,
            time_zone=self.time_zone,
            jitter_seconds=self.jitter_seconds,
            retry=self.retry_policy,
            timeout_seconds=self.timeout_seconds,
            concurrency_policy=self.concurrency_policy,
            starting_deadline_seconds=self.starting_deadline_seconds,
            catch_up=self.catch_up,
            failure_policy=failure_policy_of(self.pause_after_failures),
            catch_up_window_seconds=self.catch_up_window_seconds,
        )


def failure_policy_of(pause_after_failures: int | None) -> FailurePolicy | None:
    """The failure policy a job's `pause_after_failures` column stores."""
    if pause_after_failures is None:
        return None
    return FailurePolicy(pause_after_consecutive_failures=pause_after_failures)


def pause_after_failures(spec: JobSpec) -> int | None:
    """The `pause_after_failures` column that stores `spec`'s failure policy."""
    policy = spec.failure_policy
    return policy.pause_after_consecutive_failures if policy is not None else None


_JOB_COLUMNS = tuple(JobRow.__dataclass_fields__)


def job_of(record: asyncpg.Record) -> JobRow:
    values = {column: record[column] for column in _JOB_COLUMNS}
    values["source"] = JobSource(values["source"])
    values["retry_policy"] = retry_policy_of(values["retry_policy"])
    values["state"] = JobState(values["state"])
    values["concurrency_policy"] = ConcurrencyPolicy(values["concurrency_policy"])
    values["catch_up"] = CatchUpPolicy(values["catch_up"])
    if values["last_status"] is not None:
        values["last_status"] = ExecutionStatus(values["last_status"])
    return JobRow(**values)


@dataclass(frozen=True, slots=True)
class ExecutionRow:
    """An execution as stored (`executions`)."""

    id: uuid.UUID
    job_id: uuid.UUID
    tenant: str
    task: str
    shard: int
    due_at: datetime
    occurrence_at: datetime
    attempt: int
    job_version: int
    status: ExecutionStatus
    cancel_requested: bool
    starting_deadline_seconds: int | None
    concurrency_policy: str
    lease_owner: str | None
    lease_until: datetime | None
    enqueued_at: datetime | None
    dispatch_epoch: int | None
    started_at: datetime | None
    finished_at: datetime | None
    error_kind: str | None
    error_message: str | None
    result: Any
    created_at: datetime
    manual: bool
    """Its occurrence was run by hand (a trigger), not by the schedule."""
    backfill: uuid.UUID | None = None
    """The backfill that ran this past occurrence (None: the schedule, or a trigger)."""


_EXECUTION_COLUMNS = tuple(ExecutionRow.__dataclass_fields__)


def execution_of(record: asyncpg.Record) -> ExecutionRow:
    values = {column: record[column] for column in _EXECUTION_COLUMNS}
    values["status"] = ExecutionStatus(values["status"])
    return ExecutionRow(**values)


@dataclass(frozen=True, slots=True)
class LiveExecution:
    """An execution of a job that an overlap policy looks at: queued or running (with the
    worker holding it), or a BufferOne first attempt still scheduled and due."""

    id: uuid.UUID
    job_id: uuid.UUID
    due_at: datetime
    occurrence_at: datetime
    status: str
    lease_owner: str | None = None


@dataclass(frozen=True, slots=True)
class ExpiredRun:
    """A running execution whose lease ran out, with what the reaper needs of its job."""

    id: uuid.UUID
    job_id: uuid.UUID
    tenant: str
    task: str
    shard: int
    due_at: datetime
    occurrence_at: datetime
    attempt: int
    job_version: int
    lease_owner: str | None
    retry_policy: dict[str, Any]
    job_name: str | None
    manual: bool


@dataclass(frozen=True, slots=True)
class CrdJob:
    """A ScheduledJob's job that is not cancelled (the operator's resync)."""

    id: uuid.UUID
    tenant: str
    name: str
    state: JobState
    created_at: datetime


@dataclass(frozen=True, slots=True)
class TenantRow:
    """A tenant's settings, the quotas in force (defaults filled in) and what it uses."""

    name: str
    max_running: int | None
    max_jobs: int
    max_fires_per_minute: int
    running: int
    jobs: int
    fires_per_minute: float


def spec_of_record(row: asyncpg.Record) -> JobSpec:
    """The spec of a record that has a job's spec columns (a claim's answer, say), but for
    its failure policy, which no occurrence depends on."""
    return JobSpec(
        task=row["task"],
        payload=row["payload"],
        run_at=row["run_at"],
        cron=row["cron"],
        time_zone=row["time_zone"],
        jitter_seconds=row["jitter_seconds"],
        retry=retry_policy_of(row["retry_policy"]),
        timeout_seconds=row["timeout_seconds"],
        concurrency_policy=row["concurrency_policy"],
        starting_deadline_seconds=row["starting_deadline_seconds"],
        catch_up=row["catch_up"],
    )

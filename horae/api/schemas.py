"""Request and response bodies of the job API (the OpenAPI document is built from these)."""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from horae.api.problems import invalid
from horae.domain.backfills import DEFAULT_RATE, MAX_RATE, BackfillState, Overlap
from horae.domain.instants import check_instant
from horae.domain.limits import (
    MAX_RESULT_BYTES,
    PAUSE_REASON_MAX_CHARS,
    RESULT_DROPPED_KEY,
    contains_nul,
)
from horae.models import (
    CatchUpPolicy,
    CatchUpWindowSeconds,
    ConcurrencyPolicy,
    CronText,
    ExecutionStatus,
    FailurePolicy,
    JitterSeconds,
    JobSource,
    JobSpec,
    JobState,
    RetryPolicy,
    TaskName,
    TimeZoneName,
    UpToAWeek,
)
from horae.store.backfills import BackfillRow
from horae.store.explanation import Explanation
from horae.store.quotas import DEFAULT_MAX_FIRES_PER_MINUTE, DEFAULT_MAX_JOBS
from horae.store.rows import ExecutionRow, JobRow


class JobCreate(JobSpec):
    """A job to create: a task, a payload, and either `run_at` or `cron`."""

    name: str | None = Field(default=None, min_length=1, max_length=253)

    @field_validator("name")
    @classmethod
    def _name_storable(cls, value: str | None) -> str | None:
        if value is not None and contains_nul(value):
            raise ValueError("cannot contain the NUL character (\\u0000)")
        return value

    def spec(self) -> JobSpec:
        """The validated spec without `name` (no second validation: this one passed)."""
        fields = {k: getattr(self, k) for k in JobSpec.model_fields}
        return JobSpec.model_construct(**fields)


class JobPatch(BaseModel):
    """Fields to change; a field left out keeps its value. `payload` and `retry` are
    replaced whole, and `null` resets a field to its default: it clears `run_at`, `cron`,
    `timeout_seconds`, `starting_deadline_seconds` and `catch_up_window_seconds`. Every job
    has a task, so `task` cannot be null."""

    model_config = ConfigDict(extra="forbid")

    task: TaskName | SkipJsonSchema[None] = None  # omitted or a name, never null
    payload: dict[str, Any] | None = None
    run_at: datetime | None = None
    cron: CronText | None = None
    time_zone: TimeZoneName | None = None
    jitter_seconds: JitterSeconds | None = None
    retry: RetryPolicy | None = None
    timeout_seconds: UpToAWeek | None = None
    concurrency_policy: ConcurrencyPolicy | None = None
    starting_deadline_seconds: UpToAWeek | None = None
    catch_up: CatchUpPolicy | None = None
    failure_policy: FailurePolicy | None = None
    catch_up_window_seconds: CatchUpWindowSeconds | None = None

    @field_validator("task")
    @classmethod
    def _task_not_null(cls, value: str | None) -> str:
        if value is None:
            raise ValueError("cannot be null: every job has a task")
        return value


MAX_BATCH = 1000
"""Jobs in one batch. Checked before any job is validated: a body of a million `{}`
made a million validation errors (gigabytes) before the count was looked at."""


class BatchCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    jobs: list[JobCreate] = Field(min_length=1, max_length=MAX_BATCH)


class PauseRequest(BaseModel):
    """Why the job is paused (optional): shown as its `paused_reason` until it is resumed."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, min_length=1, max_length=PAUSE_REASON_MAX_CHARS)

    @field_validator("reason")
    @classmethod
    def _reason_storable(cls, value: str | None) -> str | None:
        if value is not None and contains_nul(value):
            raise ValueError("cannot contain the NUL character (\\u0000)")
        return value


class Created(BaseModel):
    id: uuid.UUID


class BatchCreated(BaseModel):
    ids: list[uuid.UUID]


class JobOut(BaseModel):
    id: uuid.UUID
    tenant: str
    name: str | None
    source: JobSource
    state: JobState
    spec_version: int
    task: str
    payload: dict[str, Any]
    run_at: datetime | None
    cron: str | None
    time_zone: str
    jitter_seconds: int
    retry: RetryPolicy
    timeout_seconds: int | None
    concurrency_policy: ConcurrencyPolicy
    starting_deadline_seconds: int | None
    catch_up: CatchUpPolicy
    failure_policy: FailurePolicy | None
    consecutive_failures: int = Field(
        description="Its executions that ended failed, timed out or dead since its last"
        " success (each counted once, when no retry follows it)."
    )
    paused_reason: str | None = Field(
        description="Why it is paused: the reason given to `:pause` (or a ScheduledJob's"
        " `horae.dev/pause-reason` annotation), or the failures its failure policy paused it"
        " for; null when active or paused without a reason."
    )
    paused_for_failures: bool = Field(
        description="Paused by its failure policy; `:resume` resumes it (and counts afresh)."
    )
    catch_up_window_seconds: int | None
    next_run_at: datetime | None
    last_run_at: datetime | None
    last_status: ExecutionStatus | None
    created_at: datetime
    updated_at: datetime
    next_runs: list[datetime] | None = Field(
        default=None, description="The next 5 nominal fire times (UTC); only on GET /jobs/{id}."
    )

    @classmethod
    def from_row(cls, row: JobRow, next_runs: list[datetime] | None = None) -> JobOut:
        data = {name: getattr(row, name) for name in row.__dataclass_fields__}
        data["retry"] = data.pop("retry_policy")
        data["failure_policy"] = row.spec.failure_policy
        return cls.model_validate({**data, "next_runs": next_runs})


class ExecutionError(BaseModel):
    kind: str | None
    message: str | None


class ExecutionOut(BaseModel):
    id: uuid.UUID
    job_id: uuid.UUID
    tenant: str
    task: str
    status: ExecutionStatus
    attempt: int
    due_at: datetime
    occurrence_at: datetime
    enqueued_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    error: ExecutionError | None
    result: Any = Field(
        default=None,
        description="What a succeeded attempt's handler returned (JSON, at most"
        f" {MAX_RESULT_BYTES // 1024} KiB serialized); a larger or non-JSON value is"
        f' stored as {{"{RESULT_DROPPED_KEY}": "<why>"}}. Null otherwise.',
    )
    manual: bool = Field(
        default=False,
        description="Its occurrence was run by hand (`:trigger`, `horae jobs trigger`, a "
        "ScheduledJob's `horae.dev/trigger` annotation), not by the schedule; so are its "
        "retries.",
    )
    backfill: uuid.UUID | None = Field(
        default=None,
        description="The backfill (`POST /jobs/{id}:backfill`, a Backfill resource) that ran "
        "this past occurrence; null for every other run. Its retries are not tagged.",
    )

    @classmethod
    def from_row(cls, row: ExecutionRow) -> ExecutionOut:
        data = {name: getattr(row, name) for name in row.__dataclass_fields__}
        kind, message = data.pop("error_kind"), data.pop("error_message")
        data["error"] = {"kind": kind, "message": message} if kind or message else None
        return cls.model_validate(data)


class JobPage(BaseModel):
    items: list[JobOut]
    next_cursor: str | None


class ExecutionPage(BaseModel):
    items: list[ExecutionOut]
    next_cursor: str | None


class PreviewRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cron: str | None = Field(default=None, min_length=1, max_length=200)
    run_at: datetime | None = None
    time_zone: str = Field(default="UTC", min_length=1, max_length=64)
    after: datetime | None = None
    count: int = Field(default=10, ge=1, le=100)

    @field_validator("after")
    @classmethod
    def _after_bounded(cls, value: datetime | None) -> datetime | None:
        return check_instant(value) if value is not None else None


class PreviewOut(BaseModel):
    fire_times: list[datetime]


class TenantLimit(BaseModel):
    """A tenant's settings, all replaced by a PUT (a quota left out or null: its default)."""

    model_config = ConfigDict(extra="forbid")

    max_running: int | None = Field(
        ge=1, le=1_000_000, description="Executions running at once; null: no limit."
    )
    max_jobs: int | None = Field(
        default=None,
        ge=1,
        le=100_000_000,
        description=f"Live (active or paused) jobs; null: {DEFAULT_MAX_JOBS:,}.",
    )
    max_fires_per_minute: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000_000,
        description="The sum of the live jobs' fire rates (a cron job at its densest, 60 s "
        "over its shortest gap; a one-off 1); null: "
        f"{DEFAULT_MAX_FIRES_PER_MINUTE:,}.",
    )


class TenantOut(BaseModel):
    name: str
    max_running: int | None
    running: int
    max_jobs: int = Field(description="The quota in force (the default unless set).")
    jobs: int = Field(description="Live (active or paused) jobs.")
    max_fires_per_minute: int = Field(description="The quota in force (the default unless set).")
    fires_per_minute: float = Field(description="The sum of the live jobs' fire rates.")


def encode_cursor(at: datetime, last_id: uuid.UUID) -> str:
    raw = json.dumps([at.isoformat(), str(last_id)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> tuple[datetime, uuid.UUID] | None:
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, last_id = json.loads(raw)
        parsed = datetime.fromisoformat(at)
        if parsed.tzinfo is None:
            raise ValueError("naive")
        return parsed, uuid.UUID(last_id)
    except (ValueError, TypeError, UnicodeDecodeError):
        raise invalid("cursor", "malformed cursor: pass next_cursor from a previous page") from None


class BackfillCreate(BaseModel):
    """`POST /jobs/{id}:backfill`: run the job's past occurrences in [from, to) now."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    from_at: datetime = Field(
        alias="from", description="The range's start (inclusive), with a UTC offset."
    )
    to_at: datetime = Field(
        alias="to", description="The range's end (exclusive), at most now, with a UTC offset."
    )
    rate: int = Field(
        default=DEFAULT_RATE,
        ge=1,
        le=MAX_RATE,
        description="Occurrences created a second at most (executions due now, tagged with "
        "the backfill); about one second's worth is ever queued ahead.",
    )
    overlap: Overlap = Field(
        default=Overlap.ALLOW,
        description="How the backfill's runs overlap one another: `Allow` (in parallel, "
        "bounded by the rate) or `Forbid` (one at a time). They never skip nor replace the "
        "job's scheduled runs, whatever its concurrency policy.",
    )

    @field_validator("from_at", "to_at")
    @classmethod
    def _instant(cls, value: datetime) -> datetime:
        return check_instant(value)


class BackfillOut(BaseModel):
    id: uuid.UUID
    job_id: uuid.UUID
    tenant: str
    from_at: datetime = Field(serialization_alias="from")
    to_at: datetime = Field(serialization_alias="to")
    rate: int
    overlap: Overlap
    state: BackfillState = Field(
        description="`running` (being fed, or its executions still running), `completed` (every "
        "occurrence fed and ended) or `cancelled`."
    )
    total: int = Field(description="Occurrences of the job's schedule in the range.")
    created: int = Field(description="Executions created so far.")
    existing: int = Field(description="Occurrences not backfilled because they had a run already.")
    cursor: datetime | None = Field(description="The last occurrence fed (null: none yet).")
    succeeded: int = Field(description="Its executions that succeeded (first attempts).")
    failed: int = Field(
        description="Its executions that ended otherwise: failed, timed out, dead (first "
        "attempts; a retry is an ordinary execution of the job)."
    )
    cancelled: int = Field(description="Its executions cancelled (by a cancel of the backfill).")
    live: int = Field(description="Its executions scheduled, queued or running.")
    message: str | None = Field(description="Why it was cancelled.")
    source: JobSource
    created_at: datetime
    finished_at: datetime | None

    @classmethod
    def from_row(cls, row: BackfillRow) -> BackfillOut:
        counts = row.outcomes
        live = (ExecutionStatus.SCHEDULED, ExecutionStatus.QUEUED, ExecutionStatus.RUNNING)
        other = (ExecutionStatus.SUCCEEDED, ExecutionStatus.CANCELLED, ExecutionStatus.SKIPPED)
        return cls(
            id=row.id,
            job_id=row.job_id,
            tenant=row.tenant,
            from_at=row.from_at,
            to_at=row.to_at,
            rate=row.rate,
            overlap=row.overlap,
            state=row.state,
            total=row.total,
            created=row.created,
            existing=row.existing,
            cursor=row.cursor_at,
            succeeded=counts.get(ExecutionStatus.SUCCEEDED, 0),
            failed=sum(n for s, n in counts.items() if s not in live and s not in other),
            cancelled=counts.get(ExecutionStatus.CANCELLED, 0),
            live=sum(counts.get(s, 0) for s in live),
            message=row.message,
            source=row.source,
            created_at=row.created_at,
            finished_at=row.finished_at,
        )


class BackfillList(BaseModel):
    items: list[BackfillOut]


class ExplainedAttempt(BaseModel):
    """One execution of the occurrence, with the replica that dispatched (or skipped) it."""

    execution_id: uuid.UUID
    attempt: int
    status: ExecutionStatus
    manual: bool
    due_at: datetime
    enqueued_at: datetime | None
    dispatch_epoch: int | None = Field(description="The shard's fencing epoch it went out under.")
    dispatched_by: str | None = Field(
        description="The scheduler replica that held that epoch (or skipped it), by the "
        "shard's recorded owners."
    )
    started_at: datetime | None
    worker: str | None = Field(description="The worker that claimed it.")
    finished_at: datetime | None
    error: ExecutionError | None


class ExplainedStep(BaseModel):
    at: datetime | None
    what: str = Field(
        description="due, triggered, due again, shard taken, dispatched, claimed, skipped, "
        "cancelled, retry, or the attempt's outcome (succeeded, failed, timed_out, dead)"
    )
    detail: str


class OwnerChangeOut(BaseModel):
    """The shard changed owner between the occurrence's due time and its dispatch."""

    shard: int
    at: datetime | None = Field(description="When the new owner took the shard.")
    from_owner: str | None
    from_epoch: int | None
    to_owner: str | None
    to_epoch: int


class ExplanationOut(BaseModel):
    """Why an occurrence of a job ran as it did, or has no execution."""

    job_id: uuid.UUID
    at: datetime = Field(
        description="The instant explained (`at`, or the job's latest occurrence)."
    )
    occurrence_at: datetime | None = Field(
        description="`at` when it is an occurrence of the job; null when it is not a fire time."
    )
    verdict: str = Field(description="The answer, in one line.")
    outcome: str = Field(
        description="ran_on_time, ran_late, failed, in_progress, skipped, cancelled, "
        "not_due_yet, overdue, no_row or not_a_fire_time"
    )
    reason: str | None = Field(
        description="Why, as a word: a skip's or cancel's kind (deadline, forbid, paused, "
        "catch_up, buffer_one, superseded, ...), a lateness's cause (catch_up_replay, "
        "shard_owner_changed, due_time_moved, dispatched_late, waited_for_worker), an "
        "on-time run's outside the schedule (backfill, manual), a missing row's "
        "(before_created, cancelled, retention, paused, paused_gap, catch_up_gap, unknown)"
    )
    shard: int
    due_at: datetime | None
    late_seconds: float | None = Field(
        description="How long after its due time the first attempt started (or, unclaimed, "
        "was dispatched)."
    )
    owner_change: OwnerChangeOut | None
    fire_time_before: datetime | None = Field(
        description="When `at` is not a fire time: the nearest before it."
    )
    fire_time_after: datetime | None = Field(
        description="When `at` is not a fire time: the nearest after it."
    )
    attempts: list[ExplainedAttempt]
    steps: list[ExplainedStep] = Field(description="What happened, in time order.")
    checked: list[str] = Field(description="For an occurrence without a row: what was looked at.")

    @classmethod
    def from_explanation(cls, found: Explanation) -> ExplanationOut:
        data = dataclasses.asdict(found)
        for attempt in data["attempts"]:
            kind, message = attempt.pop("error_kind"), attempt.pop("error_message")
            attempt["error"] = {"kind": kind, "message": message} if kind or message else None
        return cls.model_validate(data)

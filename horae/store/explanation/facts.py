"""What `explain` reads (`Facts`, and the rows it is made of) and what it answers
(`Explanation`, its `Step`s and `Attempt`s)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from horae.domain.limits import MAX_SKIPPED_ROWS
from horae.models import ExecutionStatus, JobState
from horae.store.rows import ExecutionRow, JobRow

LATE_AFTER = timedelta(seconds=1)
"""A first attempt that started (or, unclaimed, was dispatched) more than this after its
due time was late: dispatch and claim take milliseconds when nothing is wrong."""
RECORDED_PER_GAP = MAX_SKIPPED_ROWS
"""Skipped rows recorded for one gap (a pause, an outage): older missed ones leave none."""
GAP_KINDS = frozenset({"paused", "catch_up"})
"""Skip reasons recorded for the occurrences of a gap, after it."""


@dataclass(frozen=True, slots=True)
class Epoch:
    """A shard's fencing epoch in one store group: who took it, when (`shard_epoch_history`)."""

    group: str
    shard: int
    epoch: int
    owner: str | None
    taken_at: datetime | None
    moved_out: bool = False


@dataclass(frozen=True, slots=True)
class JobEvent:
    """A change of a job's state or spec (`job_events`): kind edited, paused, resumed or
    cancelled; an edit keeps the schedule it replaced."""

    at: datetime
    kind: str
    state: JobState
    prior_state: JobState
    spec_version: int
    prior_cron: str | None = None
    prior_time_zone: str | None = None
    prior_run_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Found:
    """An execution, and the store group it was read from (its epochs are that group's)."""

    group: str
    row: ExecutionRow


@dataclass(frozen=True)
class Facts:
    """What the store holds about the occurrence of `job` at `at`."""

    job: JobRow
    group: str
    """The job's store group now."""
    at: datetime
    now: datetime
    rows: Sequence[Found] = ()
    """The executions whose occurrence is `at` (attempts, a cancelled one, a manual run)."""
    before: ExecutionRow | None = None
    """The job's latest first attempt (not cancelled) of an occurrence before `at`."""
    after: ExecutionRow | None = None
    """Its earliest first attempt (not cancelled) of an occurrence after `at`."""
    events: Sequence[JobEvent] = ()
    epochs: Sequence[Epoch] = ()
    """The job's shard's epochs around the occurrence, in each group read."""
    history_from: datetime | None = None
    """The oldest due time whose executions are kept (retention)."""


@dataclass(frozen=True, slots=True)
class Step:
    at: datetime | None
    what: str
    detail: str


@dataclass(frozen=True, slots=True)
class Attempt:
    execution_id: uuid.UUID
    attempt: int
    status: ExecutionStatus
    manual: bool
    due_at: datetime
    enqueued_at: datetime | None
    dispatch_epoch: int | None
    dispatched_by: str | None
    """The replica that held the dispatch epoch (or that skipped it), from the history."""
    started_at: datetime | None
    worker: str | None
    finished_at: datetime | None
    error_kind: str | None
    error_message: str | None


@dataclass(frozen=True, slots=True)
class OwnerChange:
    """The shard changed owner between the due time and the dispatch."""

    shard: int
    at: datetime | None
    from_owner: str | None
    from_epoch: int | None
    to_owner: str | None
    to_epoch: int


@dataclass(frozen=True)
class Explanation:
    job_id: uuid.UUID
    at: datetime
    occurrence_at: datetime | None
    """`at` when it is an occurrence of the job (a fire time, or a manual run's instant)."""
    outcome: str
    """ran_on_time, ran_late, failed, in_progress, skipped, cancelled, not_due_yet, overdue,
    no_row or not_a_fire_time."""
    reason: str | None
    """Why, as a word: a skip's or cancel's kind, a lateness's cause, a missing row's."""
    verdict: str
    shard: int
    due_at: datetime | None = None
    late_seconds: float | None = None
    owner_change: OwnerChange | None = None
    fire_time_before: datetime | None = None
    fire_time_after: datetime | None = None
    attempts: list[Attempt] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)


def when(value: datetime | None) -> str:
    """An instant as `2026-12-02 10:00:07.123Z` (UTC, milliseconds); `-` for none."""
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def secs(delta: timedelta) -> str:
    return f"{delta.total_seconds():.1f} s"

"""New jobs: what to create (`NewJob`), and the one statement that inserts a batch of them
with their first executions (`insert_jobs`; the quota count is the caller's)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

import asyncpg

from horae.errors import ShardMoved
from horae.models import JobSource, JobSpec, JobState, shard_of
from horae.store import quotas
from horae.store.occurrences import Occurrence, first_occurrence, rate
from horae.store.queries import Q
from horae.store.rows import pause_after_failures, stored_retry_policy
from horae.store.scheduling import NOTIFY_WITHIN, new_execution_id

if TYPE_CHECKING:
    from horae.store.db import Conn


@dataclass(frozen=True)
class NewJob:
    """One job to create; `job_id` defaults to a fresh uuid."""

    spec: JobSpec
    tenant: str
    source: JobSource
    job_id: uuid.UUID = field(default_factory=uuid.uuid4)
    name: str | None = None
    idempotency_key: str | None = None
    request_hash: str | None = None
    paused: bool = False


@dataclass(frozen=True, slots=True)
class JobInserts:
    """The parameters of `insert_jobs` (jobs.sql), in their order: a column each, for the
    jobs ($1-$20, $32-$34), then for the first executions of those that run ($22-$28, $30,
    $31),
    with the instants ($21: now; $29: executions due before it are announced)."""

    ids: list[uuid.UUID]
    tenants: list[str]
    names: list[str | None]
    sources: list[str]
    tasks: list[str]
    payloads: list[dict[str, Any]]
    run_ats: list[datetime | None]
    crons: list[str | None]
    time_zones: list[str]
    jitters: list[int]
    retry_policies: list[dict[str, Any]]
    timeouts: list[int | None]
    concurrency_policies: list[str]
    deadlines: list[int | None]
    catch_ups: list[str]
    states: list[str]
    shards: list[int]
    next_run_ats: list[datetime | None]
    idempotency_keys: list[str | None]
    request_hashes: list[str | None]
    now: datetime
    execution_ids: list[uuid.UUID]
    execution_job_ids: list[uuid.UUID]
    execution_tenants: list[str]
    execution_tasks: list[str]
    execution_shards: list[int]
    due_ats: list[datetime]
    occurrence_ats: list[datetime]
    notify_before: datetime
    execution_deadlines: list[int | None]
    execution_policies: list[str]
    fires_per_minute: list[float]
    catch_up_windows: list[int | None]
    pause_after_failures: list[int | None]

    @classmethod
    def of(cls, jobs: Sequence[NewJob], *, shards: int, now: datetime) -> JobInserts:
        firsts = [first_occurrence(j.job_id, j.spec, now) for j in jobs]
        shard_of_job = [int(shard_of(j.job_id, shards)) for j in jobs]
        runnable: list[tuple[NewJob, Occurrence, int]] = [
            (j, f, s)
            for j, f, s in zip(jobs, firsts, shard_of_job, strict=True)
            if f and not j.paused
        ]
        return cls(
            ids=[j.job_id for j in jobs],
            tenants=[j.tenant for j in jobs],
            names=[j.name for j in jobs],
            sources=[j.source.value for j in jobs],
            tasks=[j.spec.task for j in jobs],
            payloads=[j.spec.payload for j in jobs],
            run_ats=[j.spec.run_at for j in jobs],
            crons=[j.spec.cron for j in jobs],
            time_zones=[j.spec.time_zone for j in jobs],
            jitters=[j.spec.jitter_seconds for j in jobs],
            retry_policies=[stored_retry_policy(j.spec.retry.model_dump()) for j in jobs],
            timeouts=[j.spec.timeout_seconds for j in jobs],
            concurrency_policies=[j.spec.concurrency_policy.value for j in jobs],
            deadlines=[j.spec.starting_deadline_seconds for j in jobs],
            catch_ups=[j.spec.catch_up.value for j in jobs],
            states=[(JobState.PAUSED if j.paused else JobState.ACTIVE).value for j in jobs],
            shards=shard_of_job,
            next_run_ats=[f.occurrence_at if f else None for f in firsts],
            idempotency_keys=[j.idempotency_key for j in jobs],
            request_hashes=[j.request_hash for j in jobs],
            now=now,
            execution_ids=[new_execution_id() for _ in runnable],
            execution_job_ids=[j.job_id for j, _, _ in runnable],
            execution_tenants=[j.tenant for j, _, _ in runnable],
            execution_tasks=[j.spec.task for j, _, _ in runnable],
            execution_shards=[s for _, _, s in runnable],
            due_ats=[f.due_at for _, f, _ in runnable],
            occurrence_ats=[f.occurrence_at for _, f, _ in runnable],
            notify_before=now + NOTIFY_WITHIN,
            execution_deadlines=[j.spec.starting_deadline_seconds for j, _, _ in runnable],
            execution_policies=[j.spec.concurrency_policy.value for j, _, _ in runnable],
            fires_per_minute=[rate(j.spec) for j in jobs],
            catch_up_windows=[j.spec.catch_up_window_seconds for j in jobs],
            pause_after_failures=[pause_after_failures(j.spec) for j in jobs],
        )

    def parameters(self) -> list[Any]:
        """$1 ... $34."""
        return [getattr(self, f.name) for f in fields(self)]


async def insert_jobs(
    conn: Conn,
    jobs: Sequence[NewJob],
    *,
    shards: int,
    now: datetime,
    checked: bool = False,
    elsewhere: quotas.Elsewhere | None = None,
) -> None:
    """Insert `jobs` (into `shards` virtual shards) and the first executions of those that
    run, in one statement; executions due soon are announced to their shards. ShardMoved
    when a job's shard moved out of this store group (nothing is inserted). Then the
    jobs' tenants' quota locks are held: `quotas.check(..., locked=True)` checks next,
    unless `checked` (a create in this one statement, outside a transaction; `elsewhere`
    as for `quotas.check`): the statement checked their use bounds, and raised
    quotas.ToCount, writing nothing, if they need counting."""
    inserts = JobInserts.of(jobs, shards=shards, now=now).parameters()
    quota = quotas.bound_parameters(elsewhere, checked=checked)
    try:
        moved: list[int] = await conn.fetchval(Q["insert_jobs"], *inserts, *quota)
    except asyncpg.RaiseError as exc:
        if checked and exc.message.startswith("horae: quota use of tenant"):
            raise quotas.ToCount(exc.message) from exc
        raise
    if moved:
        raise ShardMoved(moved)

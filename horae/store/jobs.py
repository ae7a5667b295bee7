"""The job lifecycle, one transaction per operation: create, edit, pause, resume, cancel."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import asyncpg

from horae.errors import NotFound
from horae.models import JobSource, JobSpec, JobState, shard_of
from horae.schedule import jitter_offset, next_fire_times
from horae.store.queries import Q

if TYPE_CHECKING:
    from horae.store.db import Conn

NOTIFY_WITHIN = timedelta(seconds=60)
"""Executions due sooner than this are announced to their shard's scheduler at once."""


@dataclass(frozen=True)
class Occurrence:
    occurrence_at: datetime
    due_at: datetime


def next_occurrence(job_id: uuid.UUID, spec: JobSpec, after: datetime) -> Occurrence | None:
    """The first nominal fire time strictly after `after`, and when it is due (jitter added)."""
    times = next_fire_times(
        run_at=spec.run_at, cron=spec.cron, time_zone=spec.time_zone, after=after, count=1
    )
    if not times:
        return None
    return Occurrence(times[0], times[0] + jitter_offset(job_id, spec.jitter_seconds))


def spec_from_row(row: asyncpg.Record) -> JobSpec:
    return JobSpec(
        task=row["task"],
        payload=row["payload"],
        run_at=row["run_at"],
        cron=row["cron"],
        time_zone=row["time_zone"],
        jitter_seconds=row["jitter_seconds"],
        retry=row["retry_policy"],
        timeout_seconds=row["timeout_seconds"],
        concurrency_policy=row["concurrency_policy"],
        starting_deadline_seconds=row["starting_deadline_seconds"],
    )


async def insert_execution(
    conn: Conn,
    *,
    job_id: uuid.UUID,
    tenant: str,
    task: str,
    shard: int,
    due_at: datetime,
    occurrence_at: datetime,
    attempt: int,
    job_version: int,
    now: datetime,
) -> uuid.UUID | None:
    """Insert a scheduled execution; announce it to its shard when due soon."""
    execution_id = uuid.uuid4()
    inserted = await conn.fetchval(
        Q["insert_execution"],
        execution_id,
        job_id,
        tenant,
        task,
        shard,
        due_at,
        occurrence_at,
        attempt,
        job_version,
        now,
    )
    if inserted is not None and due_at - now < NOTIFY_WITHIN:
        await conn.execute(Q["notify_shard"], shard, str(execution_id))
    return inserted  # type: ignore[no-any-return]  # asyncpg returns Any


async def create_job(
    conn: Conn,
    spec: JobSpec,
    *,
    tenant: str,
    source: JobSource,
    shards: int,
    now: datetime,
    job_id: uuid.UUID | None = None,
    name: str | None = None,
    idempotency_key: str | None = None,
    request_hash: str | None = None,
    paused: bool = False,
) -> uuid.UUID:
    """Insert a job and its first execution in one transaction."""
    job_id = job_id or uuid.uuid4()
    shard = shard_of(job_id, shards)
    first = next_occurrence(job_id, spec, now - timedelta(microseconds=1))
    if spec.run_at is not None and first is None:
        # A one-off whose time has passed (within its deadline) fires now.
        first = Occurrence(spec.run_at, spec.run_at)
    state = JobState.PAUSED if paused else JobState.ACTIVE
    async with conn.transaction():
        await conn.execute(
            Q["insert_job"],
            job_id,
            tenant,
            name,
            source.value,
            spec.task,
            spec.payload,
            spec.run_at,
            spec.cron,
            spec.time_zone,
            spec.jitter_seconds,
            spec.retry.model_dump(),
            spec.timeout_seconds,
            spec.concurrency_policy.value,
            spec.starting_deadline_seconds,
            state.value,
            shard,
            first.occurrence_at if first else None,
            idempotency_key,
            request_hash,
            now,
        )
        if first is not None and not paused:
            await insert_execution(
                conn,
                job_id=job_id,
                tenant=tenant,
                task=spec.task,
                shard=shard,
                due_at=first.due_at,
                occurrence_at=first.occurrence_at,
                attempt=1,
                job_version=1,
                now=now,
            )
    return job_id


async def edit_job(conn: Conn, job_id: uuid.UUID, spec: JobSpec, *, now: datetime) -> int:
    """Replace the spec (version + 1), cancel pending executions, schedule the next one."""
    async with conn.transaction():
        row = await conn.fetchrow(Q["get_job_for_update"], job_id)
        if row is None:
            raise NotFound(f"job {job_id} not found")
        if row["state"] == JobState.CANCELLED:
            raise NotFound(f"job {job_id} is cancelled")
        await conn.execute(
            Q["cancel_pending"], job_id, now, "superseded", "job spec edited before this ran"
        )
        nxt = next_occurrence(job_id, spec, now)
        updated = await conn.fetchrow(
            Q["update_job_spec"],
            job_id,
            spec.task,
            spec.payload,
            spec.run_at,
            spec.cron,
            spec.time_zone,
            spec.jitter_seconds,
            spec.retry.model_dump(),
            spec.timeout_seconds,
            spec.concurrency_policy.value,
            spec.starting_deadline_seconds,
            nxt.occurrence_at if nxt else None,
            now,
        )
        assert updated is not None  # the row is locked above
        version, state = updated["spec_version"], updated["state"]
        if nxt is not None and state == JobState.ACTIVE:
            await insert_execution(
                conn,
                job_id=job_id,
                tenant=row["tenant"],
                task=spec.task,
                shard=row["shard"],
                due_at=nxt.due_at,
                occurrence_at=nxt.occurrence_at,
                attempt=1,
                job_version=version,
                now=now,
            )
        return int(version)


async def set_paused(conn: Conn, job_id: uuid.UUID, paused: bool, *, now: datetime) -> None:
    """Pause (cancel pending executions) or resume (schedule the next occurrence from now)."""
    async with conn.transaction():
        row = await conn.fetchrow(Q["get_job_for_update"], job_id)
        if row is None:
            raise NotFound(f"job {job_id} not found")
        state = JobState(row["state"])
        if paused and state == JobState.ACTIVE:
            await conn.execute(Q["cancel_pending"], job_id, now, "paused", "job paused")
            await conn.execute(Q["set_job_state"], job_id, JobState.PAUSED.value, None, now)
        elif not paused and state == JobState.PAUSED:
            spec = spec_from_row(row)
            nxt = next_occurrence(job_id, spec, now)
            if nxt is None and spec.run_at is not None:
                nxt = Occurrence(spec.run_at, spec.run_at)
            await conn.execute(
                Q["set_job_state"],
                job_id,
                JobState.ACTIVE.value,
                nxt.occurrence_at if nxt else None,
                now,
            )
            if nxt is not None:
                await insert_execution(
                    conn,
                    job_id=job_id,
                    tenant=row["tenant"],
                    task=spec.task,
                    shard=row["shard"],
                    due_at=max(nxt.due_at, now),
                    occurrence_at=nxt.occurrence_at,
                    attempt=1,
                    job_version=row["spec_version"],
                    now=now,
                )


async def cancel_job(conn: Conn, job_id: uuid.UUID, *, now: datetime) -> bool:
    """Cancel a job: pending executions cancelled, history kept. False if already gone."""
    async with conn.transaction():
        row = await conn.fetchrow(Q["get_job_for_update"], job_id)
        if row is None or row["state"] == JobState.CANCELLED:
            return False
        await conn.execute(Q["cancel_pending"], job_id, now, "cancelled", "job cancelled")
        await conn.execute(Q["set_job_state"], job_id, JobState.CANCELLED.value, None, now)
        await conn.execute(Q["notify_job"], str(job_id))
        return True


async def get_job(conn: Conn, job_id: uuid.UUID, tenant: str | None = None) -> asyncpg.Record:
    row: asyncpg.Record | None = await conn.fetchrow(Q["get_job"], job_id, tenant)
    if row is None:
        raise NotFound(f"job {job_id} not found")
    return row


async def find_job(conn: Conn, job_id: uuid.UUID) -> asyncpg.Record | None:
    return await conn.fetchrow(Q["get_job"], job_id, None)


async def cancel_crd_namesake(
    conn: Conn, tenant: str, name: str, *, keep: uuid.UUID, now: datetime
) -> None:
    """Cancel a live CRD job of this name whose resource was replaced while we were away."""
    old = await find_live_crd_job(conn, tenant, name)
    if old is not None and old != keep:
        await cancel_job(conn, old, now=now)


async def find_live_crd_job(conn: Conn, tenant: str, name: str) -> uuid.UUID | None:
    """The live job of the ScheduledJob NAMESPACE/NAME, if any."""
    job_id: uuid.UUID | None = await conn.fetchval(Q["live_crd_job"], tenant, name)
    return job_id

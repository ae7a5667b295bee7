"""Execution transitions used by the scheduler (preload, fenced dispatch) and the worker
(claim, finish). Each transition is a single conditional statement whose row count decides.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import asyncpg

from horae.models import ExecutionStatus
from horae.store.jobs import insert_execution, next_occurrence
from horae.store.queries import Q

if TYPE_CHECKING:
    from horae.store.db import Conn


@dataclass(frozen=True, slots=True)
class Due:
    """A pending execution held in a scheduler's preload window."""

    id: uuid.UUID
    job_id: uuid.UUID
    tenant: str
    task: str
    shard: int
    due_at: datetime
    occurrence_at: datetime
    attempt: int


async def preload(conn: Conn, shards: Sequence[int], until: datetime, limit: int) -> list[Due]:
    rows = await conn.fetch(Q["preload_due"], list(shards), until, limit)
    return [Due(**dict(r)) for r in rows]


async def take_shard(conn: Conn, shard: int, owner: str, now: datetime) -> int:
    """Bump the shard's fencing epoch; the caller now owns the shard under the result."""
    return int(await conn.fetchval(Q["take_shard"], shard, owner, now))


async def mark_queued(
    conn: Conn, shard: int, epoch: int, batch: Sequence[Due], now: datetime
) -> int | None:
    """Fenced: mark a published batch queued and schedule cron jobs' next occurrences.

    The epoch row is share-locked for the whole transaction, so a replica taking
    the shard (which bumps the epoch) waits for this to commit, and this finds
    nothing to lock once the epoch has moved. Rows a worker already claimed stay
    as they are; their next occurrence is still scheduled (idempotently).
    Returns how many rows became queued, or None when fenced out.
    """
    async with conn.transaction():
        if await conn.fetchval(Q["lock_epoch"], shard, epoch) is None:
            return None
        status = await conn.execute(
            Q["mark_queued"], shard, epoch, [d.id for d in batch], [d.due_at for d in batch], now
        )
        for due in batch:
            if due.attempt == 1:
                await _schedule_next(conn, due.job_id, due.occurrence_at, now)
        return int(status.split()[-1])


async def _schedule_next(
    conn: Conn, job_id: uuid.UUID, occurrence_at: datetime, now: datetime
) -> None:
    from horae.store.jobs import spec_from_row

    job = await conn.fetchrow(Q["get_job"], job_id, None)
    if job is None or job["cron"] is None or job["state"] != "active":
        return
    nxt = next_occurrence(job_id, spec_from_row(job), occurrence_at)
    if nxt is None:
        return
    await insert_execution(
        conn,
        job_id=job_id,
        tenant=job["tenant"],
        task=job["task"],
        shard=job["shard"],
        due_at=nxt.due_at,
        occurrence_at=nxt.occurrence_at,
        attempt=1,
        job_version=job["spec_version"],
        now=now,
    )
    await conn.execute(Q["set_next_run"], job_id, nxt.occurrence_at, now)


@dataclass(frozen=True)
class Claimed:
    """A claimed execution with what its handler needs."""

    id: uuid.UUID
    job_id: uuid.UUID
    tenant: str
    task: str
    shard: int
    due_at: datetime
    occurrence_at: datetime
    attempt: int
    job_version: int
    payload: dict[str, Any]
    timeout_seconds: int | None
    retry_policy: dict[str, Any]
    run_at: datetime | None
    source: str
    name: str | None


async def claim(
    conn: Conn,
    execution_id: uuid.UUID,
    due_at: datetime,
    *,
    owner: str,
    now: datetime,
    lease: timedelta,
) -> Claimed | None:
    """Claim for `owner`; None for a duplicate or a stale execution (then cancelled)."""
    async with conn.transaction():
        row = await conn.fetchrow(Q["claim_execution"], execution_id, due_at, owner, now, lease)
        if row is not None:
            return Claimed(**dict(row))
        job_id = await conn.fetchval(Q["cancel_stale"], execution_id, due_at, now)
        if job_id is not None:
            await conn.execute(Q["notify_job"], str(job_id))
        return None


async def finish(
    conn: Conn,
    claimed: Claimed,
    *,
    owner: str,
    status: ExecutionStatus,
    now: datetime,
    error_kind: str | None = None,
    error_message: str | None = None,
    result: Any = None,
    retry_at: datetime | None = None,
) -> bool:
    """Record the terminal outcome (and a retry execution) in one transaction.

    False when this owner no longer holds the execution (its lease was lost).
    """
    async with conn.transaction():
        job_id = await conn.fetchval(
            Q["finish_execution"],
            claimed.id,
            claimed.due_at,
            owner,
            status.value,
            now,
            error_kind,
            error_message,
            result,
        )
        if job_id is None:
            return False
        final = retry_at is None
        if retry_at is not None:
            await insert_execution(
                conn,
                job_id=claimed.job_id,
                tenant=claimed.tenant,
                task=claimed.task,
                shard=claimed.shard,
                due_at=retry_at,
                occurrence_at=claimed.occurrence_at,
                attempt=claimed.attempt + 1,
                job_version=claimed.job_version,
                now=now,
            )
        await conn.execute(Q["record_job_run"], claimed.job_id, now, status.value, final)
        await conn.execute(Q["notify_job"], str(claimed.job_id))
        return True


async def for_job(
    conn: Conn,
    job_id: uuid.UUID,
    *,
    status: ExecutionStatus | None = None,
    before: tuple[datetime, uuid.UUID] | None = None,
    limit: int = 50,
) -> list[asyncpg.Record]:
    """A job's executions, newest first, before the cursor `before` (due_at, id)."""
    due, last_id = before if before else (None, None)
    return list(await conn.fetch(Q["job_executions"], job_id, status, due, last_id, limit))


async def get(conn: Conn, execution_id: uuid.UUID, tenant: str | None) -> asyncpg.Record | None:
    return await conn.fetchrow(Q["get_execution"], execution_id, tenant)

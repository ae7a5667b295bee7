"""Execution transitions used by the scheduler (preload, fenced dispatch) and the worker
(claim, finish). Each transition is a single conditional statement whose row count decides.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import asyncpg

from horae.models import ExecutionStatus
from horae.store.jobs import insert_execution, next_occurrence, spec_from_row
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
    starting_deadline_seconds: int | None = None
    concurrency_policy: str = "Allow"


MIN_CURSOR = (datetime(1970, 1, 1, tzinfo=UTC), uuid.UUID(int=0))


async def preload(
    conn: Conn,
    shards: Sequence[int],
    until: datetime,
    limit: int,
    after: tuple[datetime, uuid.UUID] = MIN_CURSOR,
) -> list[Due]:
    """Pending executions of `shards` due before `until`, after the cursor `after`."""
    rows = await conn.fetch(Q["preload_due"], list(shards), until, after[0], after[1], limit)
    return [Due(**dict(r)) for r in rows]


async def take_shard(conn: Conn, shard: int, owner: str, now: datetime) -> int:
    """Bump the shard's fencing epoch; the caller now owns the shard under the result."""
    return int(await conn.fetchval(Q["take_shard"], shard, owner, now))


async def live_of_jobs(conn: Conn, job_ids: Sequence[uuid.UUID]) -> list[asyncpg.Record]:
    """Queued or running executions of these jobs."""
    return list(await conn.fetch(Q["live_executions_of_jobs"], list(job_ids)))


@dataclass(frozen=True)
class Skip:
    due: Due
    kind: str
    message: str


async def mark_queued(
    conn: Conn,
    shard: int,
    epoch: int,
    batch: Sequence[Due],
    now: datetime,
    *,
    skipped: Sequence[Skip] = (),
    cancel: Sequence[tuple[uuid.UUID, datetime]] = (),
) -> int | None:
    """Fenced, one transaction: mark a published batch queued, record skipped occurrences,
    request cancellation of replaced predecessors, and schedule cron jobs' next occurrences.

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
        for kind in {s.kind for s in skipped}:
            group = [s for s in skipped if s.kind == kind]
            await conn.execute(
                Q["skip_executions"], shard, epoch, [s.due.id for s in group],
                [s.due.due_at for s in group], now, kind, group[0].message,
            )  # fmt: skip
        if cancel:
            await conn.execute(Q["request_cancel"], [c[0] for c in cancel], [c[1] for c in cancel])
        await _schedule_next(conn, [*batch, *(s.due for s in skipped)], now)
        return int(status.split()[-1])


async def stale_queued(
    conn: Conn, shards: Sequence[int], before: datetime, limit: int
) -> list[Due]:
    rows = await conn.fetch(Q["stale_queued"], list(shards), before, limit)
    return [Due(**dict(r)) for r in rows]


async def touch_queued(
    conn: Conn, shard: int, epoch: int, batch: Sequence[Due], now: datetime
) -> None:
    await conn.execute(
        Q["touch_queued"], shard, epoch, [d.id for d in batch], [d.due_at for d in batch], now
    )


async def expired_running(
    conn: Conn, shards: Sequence[int], now: datetime, limit: int
) -> list[asyncpg.Record]:
    return list(await conn.fetch(Q["expired_running"], list(shards), now, limit))


async def lose_lease(
    conn: Conn, row: asyncpg.Record, *, epoch: int, now: datetime, retry_at: datetime | None
) -> bool:
    """Fenced: the expired running execution `row` becomes failed (with a retry at
    `retry_at`) or dead (retry_at None). False when it is no longer expired or not ours."""
    status = ExecutionStatus.FAILED if retry_at is not None else ExecutionStatus.DEAD
    async with conn.transaction():
        job_id = await conn.fetchval(
            Q["lose_lease"], row["id"], row["due_at"], row["shard"], epoch, now, status.value
        )
        if job_id is None:
            return False
        if retry_at is not None:
            await insert_execution(
                conn, job_id=row["job_id"], tenant=row["tenant"], task=row["task"],
                shard=row["shard"], due_at=retry_at, occurrence_at=row["occurrence_at"],
                attempt=row["attempt"] + 1, job_version=row["job_version"], now=now,
            )  # fmt: skip
        await conn.execute(Q["record_job_run"], row["job_id"], now, status.value, retry_at is None)
        return True


async def _schedule_next(conn: Conn, dues: Sequence[Due], now: datetime) -> None:
    """Insert the next occurrence of each active cron job among `dues` (first attempts).

    One query finds which jobs recur, so a spike of one-offs costs one statement here.
    """
    firsts = {d.job_id: d for d in dues if d.attempt == 1}
    if not firsts:
        return
    for job in await conn.fetch(Q["recurring_jobs"], list(firsts)):
        due = firsts[job["id"]]
        nxt = next_occurrence(job["id"], spec_from_row(job), due.occurrence_at)
        if nxt is None:
            continue
        await insert_execution(
            conn,
            job_id=job["id"],
            tenant=job["tenant"],
            task=job["task"],
            shard=job["shard"],
            due_at=nxt.due_at,
            occurrence_at=nxt.occurrence_at,
            attempt=1,
            job_version=job["spec_version"],
            now=now,
        )
        await conn.execute(Q["set_next_run"], job["id"], nxt.occurrence_at, now)


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


@dataclass(frozen=True)
class Throttled:
    """The tenant had no free slot: the execution is due again at `due_at`."""

    due_at: datetime


async def claim(
    conn: Conn,
    execution_id: uuid.UUID,
    due_at: datetime,
    *,
    owner: str,
    now: datetime,
    lease: timedelta,
    tenant: str | None = None,
    throttle_delay: timedelta = timedelta(seconds=1),
) -> Claimed | Throttled | None:
    """Claim for `owner`, within the tenant's limit, in one transaction.

    None for a duplicate or a stale execution (a stale one is cancelled);
    `Throttled` when the tenant already runs its `max_running` executions (the
    execution goes back to `scheduled` a little later, without using an attempt).
    Limits are counted from the running rows themselves, so a killed worker leaks
    no slot: its executions stop counting when the reaper ends them.
    """
    async with conn.transaction():
        limit = await conn.fetchval(Q["tenant_limit"], tenant) if tenant else None
        if limit is not None:
            await conn.execute(Q["lock_tenant"], tenant)
            if await conn.fetchval(Q["tenant_running"], tenant) >= limit:
                later = now + throttle_delay * random.uniform(1.0, 1.5)
                shard = await conn.fetchval(Q["throttle_execution"], execution_id, due_at, later)
                if shard is None:
                    return None
                await conn.execute(Q["notify_shard"], shard, str(execution_id))
                return Throttled(later)
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


async def heartbeat(conn: Conn, *, owner: str, now: datetime, lease: timedelta) -> list[uuid.UUID]:
    """Extend the leases of all of `owner`'s running executions in one statement; return
    those marked for cancellation (job cancelled, or replaced under `Replace`)."""
    rows = await conn.fetch(Q["heartbeat"], owner, now, lease)
    return [r["id"] for r in rows if r["cancel_requested"]]


async def release_running(
    conn: Conn, *, owner: str, ids: Sequence[uuid.UUID], now: datetime
) -> int:
    """Put `owner`'s unfinished executions back to `scheduled`, due now, and tell their
    shards' schedulers. Returns how many."""
    async with conn.transaction():
        rows = await conn.fetch(Q["release_running"], owner, list(ids), now)
        for shard in {r["shard"] for r in rows}:
            await conn.execute(Q["notify_shard"], shard, "released")
    return len(rows)

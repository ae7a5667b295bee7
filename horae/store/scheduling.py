"""Putting executions on the schedule: ids, inserts (announced to their shards' schedulers
when due soon), and a job's next occurrence that is not scheduled yet."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from horae.models import JobSpec
from horae.store.boundary import translated
from horae.store.occurrences import Occurrence, next_occurrence
from horae.store.queries import Q

if TYPE_CHECKING:
    from horae.store.db import Conn

NOTIFY_WITHIN = timedelta(seconds=60)
"""Executions due sooner than this are announced to their shard's scheduler at once."""


@dataclass(frozen=True, slots=True)
class NewExecution:
    """An execution to schedule (a job's next occurrence, or a retry)."""

    job_id: uuid.UUID
    tenant: str
    task: str
    shard: int
    due_at: datetime
    occurrence_at: datetime
    attempt: int
    job_version: int
    manual: bool = False
    """Run by hand (a trigger), and so are its retries."""


def new_execution_id() -> uuid.UUID:
    """A UUIDv7 (RFC 9562): milliseconds since the epoch, then random bits. Executions
    created later sort later among those due at the same instant, so the scheduler's
    preload cursor, which walks (due_at, id), finds new rows ahead of it instead of behind
    it (see `dispatch.parse_notify`). Correctness never depends on this order, only the work."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & (2**48 - 1)) << 80 | 0x7 << 76 | (rand >> 62 & 0xFFF) << 64
    value |= 0b10 << 62 | rand & (2**62 - 1)
    return uuid.UUID(int=value)


@translated
async def insert_executions(
    conn: Conn, new: Sequence[NewExecution], now: datetime
) -> list[uuid.UUID]:
    """Insert scheduled executions in one statement (an occurrence already scheduled is
    left alone); those due soon are announced to their shards. Returns the ids inserted."""
    if not new:
        return []
    rows = await conn.fetch(
        Q["insert_executions"],
        [new_execution_id() for _ in new],
        [n.job_id for n in new],
        [n.tenant for n in new],
        [n.task for n in new],
        [n.shard for n in new],
        [n.due_at for n in new],
        [n.occurrence_at for n in new],
        [n.attempt for n in new],
        [n.job_version for n in new],
        now,
        now + NOTIFY_WITHIN,
        [n.manual for n in new],
    )
    return [r["id"] for r in rows]


@translated
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
    manual: bool = False,
) -> uuid.UUID | None:
    """Insert one scheduled execution; announce it to its shard when due soon."""
    new = NewExecution(
        job_id, tenant, task, shard, due_at, occurrence_at, attempt, job_version, manual
    )
    inserted = await insert_executions(conn, [new], now)
    return inserted[0] if inserted else None


@translated
async def schedule_occurrence(
    conn: Conn,
    job_id: uuid.UUID,
    spec: JobSpec,
    occurrence: Occurrence,
    *,
    tenant: str,
    shard: int,
    job_version: int,
    now: datetime,
) -> Occurrence | None:
    """Schedule `occurrence`, or the first later one that has no live row yet.

    An occurrence that already has a live row (say it is running while the job
    is edited) is not run twice; the job still gets its next pending execution.
    """
    current: Occurrence | None = occurrence
    for _ in range(10):
        if current is None:
            return None
        inserted = await insert_execution(
            conn,
            job_id=job_id,
            tenant=tenant,
            task=spec.task,
            shard=shard,
            due_at=current.due_at,
            occurrence_at=current.occurrence_at,
            attempt=1,
            job_version=job_version,
            now=now,
        )
        if inserted is not None:
            return current
        current = next_occurrence(job_id, spec, current.occurrence_at)
    return None

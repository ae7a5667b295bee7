"""Backfills in the store: create one (its occurrences counted), read one with its outcome
counts, cancel one (its executions not dispatched yet end cancelled), and the feeder's
writes: the running backfills of a scheduler's shards, a fed slice (fenced by the caller:
`dispatch.fenced`), and the end of one fed to its end."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from horae.domain.backfills import (
    MAX_OCCURRENCES,
    BackfillState,
    Overlap,
    check_range,
    check_rate,
    check_total,
)
from horae.errors import Conflict, NotFound
from horae.models import ExecutionStatus, JobSource, JobState
from horae.store.boundary import translated
from horae.store.occurrences import count_fire_times
from horae.store.queries import Q
from horae.store.scheduling import new_execution_id

if TYPE_CHECKING:
    import asyncpg

    from horae.store.db import Conn


@dataclass(frozen=True, slots=True)
class BackfillRow:
    """A backfill as stored (`backfills`), with its executions' outcomes when read for it."""

    id: uuid.UUID
    tenant: str
    job_id: uuid.UUID
    shard: int
    source: JobSource
    crd_uid: str | None
    cron: str
    time_zone: str
    from_at: datetime
    to_at: datetime
    rate: int
    overlap: Overlap
    state: BackfillState
    cursor_at: datetime | None
    total: int
    created: int
    existing: int
    fed_at: datetime
    message: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    outcomes: dict[ExecutionStatus, int] = field(default_factory=dict)
    """How many of its executions (first attempts) are in each status."""

    @property
    def fed(self) -> bool:
        """Every occurrence of its range was created, or had a run already."""
        return self.created + self.existing >= self.total


_COLUMNS = tuple(f for f in BackfillRow.__dataclass_fields__ if f != "outcomes")


def backfill_of(record: asyncpg.Record) -> BackfillRow:
    values = {column: record[column] for column in _COLUMNS}
    values["source"] = JobSource(values["source"])
    values["overlap"] = Overlap(values["overlap"])
    values["state"] = BackfillState(values["state"])
    return BackfillRow(**values)


@dataclass(frozen=True, slots=True)
class NewBackfill:
    """A backfill to create: the job's occurrences in [from_at, to_at)."""

    job_id: uuid.UUID
    from_at: datetime
    to_at: datetime
    rate: int
    overlap: Overlap
    source: JobSource = JobSource.API
    crd_uid: str | None = None
    """A Backfill resource's metadata.uid: it makes one backfill, however often asked."""


@translated
async def create_backfill(
    conn: Conn, new: NewBackfill, *, now: datetime, tenant: str | None = None
) -> BackfillRow:
    """Create a backfill of the job (of `tenant`; None: any), fed from now on. NotFound for
    no such job; Conflict for a one-off or a job that ended; InvalidBackfill (naming the
    field) for a range not in the past, empty, or of more than `MAX_OCCURRENCES`."""
    check_range(new.from_at, new.to_at, now)
    check_rate(new.rate)
    record = await conn.fetchrow(Q["get_job"], new.job_id, tenant)
    if record is None:
        raise NotFound(f"job {new.job_id} not found")
    cron, time_zone, state = record["cron"], record["time_zone"], JobState(record["state"])
    if cron is None:
        raise Conflict(
            f"job {new.job_id} is a one-off (run_at): only a cron job's occurrences can be "
            f"backfilled"
        )
    if state not in (JobState.ACTIVE, JobState.PAUSED):
        raise Conflict(f"job {new.job_id} is {state}: only an active or paused job is backfilled")
    # Up to a million fire times take seconds to count: off the event loop.
    total = await asyncio.to_thread(
        count_fire_times, cron, time_zone, start=new.from_at, before=new.to_at, cap=MAX_OCCURRENCES
    )
    check_total(total)
    row = await conn.fetchrow(
        Q["insert_backfill"],
        new_execution_id(),
        record["tenant"],
        new.job_id,
        record["shard"],
        new.source.value,
        new.crd_uid,
        cron,
        time_zone,
        new.from_at,
        new.to_at,
        new.rate,
        new.overlap.value,
        total,
        now,
    )
    assert row is not None  # inserted, or the resource's made before
    return backfill_of(row)


@translated
async def get_backfill(
    conn: Conn, backfill_id: uuid.UUID, tenant: str | None = None
) -> BackfillRow | None:
    """The backfill (of `tenant`; None: any) with its executions' outcomes, or None."""
    row = await conn.fetchrow(Q["get_backfill"], backfill_id, tenant)
    return await _with_outcomes(conn, backfill_of(row)) if row is not None else None


@translated
async def backfill_of_resource(conn: Conn, uid: str) -> BackfillRow | None:
    """The backfill a Backfill resource made, with its outcomes, or None."""
    row = await conn.fetchrow(Q["backfill_of_resource"], uid)
    return await _with_outcomes(conn, backfill_of(row)) if row is not None else None


@translated
async def job_backfills(
    conn: Conn, job_id: uuid.UUID, tenant: str, limit: int
) -> list[BackfillRow]:
    """A job's backfills, newest first, with their outcomes."""
    rows = await conn.fetch(Q["job_backfills"], job_id, tenant, limit)
    return [await _with_outcomes(conn, backfill_of(r)) for r in rows]


async def _with_outcomes(conn: Conn, row: BackfillRow) -> BackfillRow:
    counts = await conn.fetch(Q["backfill_outcomes"], row.id)
    outcomes = {ExecutionStatus(r["status"]): int(r["n"]) for r in counts}
    return BackfillRow(**{c: getattr(row, c) for c in _COLUMNS}, outcomes=outcomes)


@translated
async def cancel_backfill(
    conn: Conn,
    backfill_id: uuid.UUID,
    *,
    now: datetime,
    tenant: str | None = None,
    why: str = "cancelled",
) -> bool:
    """Cancel a running backfill: nothing more is fed, and its executions not dispatched yet
    end `cancelled` ("backfill cancelled"); those queued or running finish. False when it
    was not running (ended already). NotFound when there is none (for `tenant`)."""
    async with conn.transaction():
        cancelled = await conn.fetchval(Q["cancel_backfill"], backfill_id, tenant, why, now)
        if cancelled is None:
            if await conn.fetchrow(Q["get_backfill"], backfill_id, tenant) is None:
                raise NotFound(f"backfill {backfill_id} not found")
            return False
        # The cancel holds the backfill's row: a feed in flight committed before it, so its
        # rows are seen here, and no feed comes after (it finds the backfill cancelled).
        await conn.execute(Q["cancel_backfill_executions"], backfill_id, now)
        return True


# -- the scheduler's feeder ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Feeding:
    """A running backfill of a held shard, as its feeder reads it."""

    backfill: BackfillRow
    job_state: JobState
    task: str
    job_version: int
    live: int
    """Its executions scheduled, queued or running."""


@translated
async def running_backfills(conn: Conn, shards: Sequence[int]) -> list[Feeding]:
    rows = await conn.fetch(Q["running_backfills"], list(shards))
    return [
        Feeding(backfill_of(r), JobState(r["job_state"]), r["task"], r["spec_version"], r["live"])
        for r in rows
    ]


@translated
async def feed(
    conn: Conn,
    f: Feeding,
    occurrences: Sequence[datetime],
    *,
    fed_at: datetime,
    now: datetime,
) -> int | None:
    """Inside `dispatch.fenced` (the job's shard held): insert `occurrences` (the next slice
    after the cursor) as executions due `now` tagged with the backfill, and advance its
    cursor to the last one, in one transaction. None when the backfill was cancelled (or fed
    by another) meanwhile; else how many were inserted (an occurrence with a run is not)."""
    b = f.backfill
    async with conn.transaction():
        if await conn.fetchval(Q["lock_backfill_feed"], b.id, b.cursor_at) is None:
            return None
        inserted = int(
            await conn.fetchval(
                Q["insert_backfill_executions"],
                [new_execution_id() for _ in occurrences],
                b.job_id,
                b.tenant,
                f.task,
                b.shard,
                f.job_version,
                b.id,
                now,
                list(occurrences),
            )
        )
        await conn.execute(
            Q["advance_backfill"],
            b.id,
            occurrences[-1],
            inserted,
            len(occurrences) - inserted,
            fed_at,
            now,
        )
        return inserted


@translated
async def complete_backfill(conn: Conn, backfill_id: uuid.UUID, now: datetime) -> bool:
    """A backfill fed to its end whose executions all ended becomes completed."""
    return await conn.fetchval(Q["complete_backfill"], backfill_id, now) is not None

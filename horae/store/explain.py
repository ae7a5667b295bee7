"""What `horae explain` reads, from every store group that may hold it (a job's history
stays in a group its shard left): the executions of one occurrence of a job and its nearest
neighbours, the job's changes of state and spec (`job_events`), its shard's owners by
fencing epoch (`shard_epoch_history`) and the history kept (retention). `explanation`
tells why from these."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

from horae.models import JobState
from horae.store import routing
from horae.store.boundary import translated
from horae.store.explanation import (
    Epoch,
    Explanation,
    Facts,
    Found,
    JobEvent,
    default_occurrence,
    explain,
)
from horae.store.installation import history_kept_from, read_installation
from horae.store.queries import Q
from horae.store.rows import ExecutionRow, execution_of

if TYPE_CHECKING:
    from horae.store.db import Conn
    from horae.store.groups import Store

T = TypeVar("T")

EVENTS_READ = 1000
"""A job's latest changes read (an edit a day for three years)."""
_TICK = timedelta(microseconds=1)


@translated
async def job_events(conn: Conn, job_id: uuid.UUID) -> list[JobEvent]:
    """The job's latest `EVENTS_READ` changes of state and spec here, oldest first."""
    rows = await conn.fetch(Q["job_events"], job_id, EVENTS_READ)
    return [
        JobEvent(
            at=r["at"],
            kind=r["kind"],
            state=JobState(r["state"]),
            prior_state=JobState(r["prior_state"]),
            spec_version=r["spec_version"],
            prior_cron=r["prior_cron"],
            prior_time_zone=r["prior_time_zone"],
            prior_run_at=r["prior_run_at"],
        )
        for r in rows
    ]


@translated
async def occurrence(
    conn: Conn, job_id: uuid.UUID, at: datetime
) -> tuple[list[ExecutionRow], ExecutionRow | None, ExecutionRow | None]:
    """The executions of the job's occurrence at `at` here, and the first attempts of its
    nearest occurrences before and after."""
    rows = [execution_of(r) for r in await conn.fetch(Q["occurrence_rows"], job_id, at)]
    before = await conn.fetchrow(Q["occurrence_before"], job_id, at)
    after = await conn.fetchrow(Q["occurrence_after"], job_id, at)
    return (
        rows,
        execution_of(before) if before is not None else None,
        execution_of(after) if after is not None else None,
    )


@translated
async def shard_epochs(
    conn: Conn, group: str, shard: int, since: datetime, until: datetime, numbers: Sequence[int]
) -> list[Epoch]:
    """The epochs of `shard` here that tell who held it from `since` to `until`, and the
    epochs `numbers` with those before them."""
    rows = await conn.fetch(Q["shard_epochs_around"], shard, since, until, list(numbers))
    return [Epoch(group=group, **dict(r)) for r in rows]


async def _each(store: Store, call: Callable[[Conn], Awaitable[T]]) -> list[tuple[str, T]]:
    async def one(group: str) -> tuple[str, T]:
        async with store.database(group).acquire() as conn:
            return group, await call(conn)

    return list(await asyncio.gather(*(one(group) for group, _ in store.each())))


async def explain_occurrence(
    store: Store, job_id: uuid.UUID, *, tenant: str | None, at: datetime | None, now: datetime
) -> Explanation:
    """Why the job's occurrence at `at` (None: its most recent, `default_occurrence`) went as
    it did. NotFound for a job not there (or of another tenant)."""
    job = await routing.get_job(store, job_id, tenant)
    home = store.catalog.group_of(job.shard)
    events = sorted(
        (e for _, found in await _each(store, lambda c: job_events(c, job_id)) for e in found),
        key=lambda e: e.at,
    )
    if at is None:
        latest = [
            row
            for _, (_, row, _) in await _each(store, lambda c: occurrence(c, job_id, now + _TICK))
            if row is not None
        ]
        newest = max(latest, key=lambda r: r.occurrence_at, default=None)
        at = default_occurrence(job, events, newest, now)
    when = at
    parts = await _each(store, lambda c: occurrence(c, job_id, when))
    rows = {found.row.id: found for found in _found(parts)}  # a row a move copied: once
    befores = [b for _, (_, b, _) in parts if b is not None]
    afters = [a for _, (_, _, a) in parts if a is not None]
    epochs: list[Epoch] = []
    for group, (here, _, _) in parts:
        if not here and group != home:
            continue
        since = min([at, *(r.due_at for r in here)])
        numbers = sorted({r.dispatch_epoch for r in here if r.dispatch_epoch is not None})
        async with store.database(group).acquire() as conn:
            epochs += await shard_epochs(conn, group, job.shard, since, now, numbers)
    async with store.home.acquire() as conn:
        retention = (await read_installation(conn)).retention_days
    facts = Facts(
        job=job,
        group=home,
        at=at,
        now=now,
        rows=list(rows.values()),
        before=max(befores, key=lambda r: r.occurrence_at, default=None),
        after=min(afters, key=lambda r: r.occurrence_at, default=None),
        events=events,
        epochs=epochs,
        history_from=history_kept_from(now.date(), retention),
    )
    return explain(facts)


def _found(
    parts: Sequence[tuple[str, tuple[list[ExecutionRow], object, object]]],
) -> list[Found]:
    return [Found(group, row) for group, (rows, _, _) in parts for row in rows]

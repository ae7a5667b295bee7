"""Calls across store groups, for the API, the operator and the CLI.

One job's reads and writes go to the group of its shard (`on_job`); when the job is not
found there and the catalog moved meanwhile (a move took the shard while this call waited
for the job's row, or before it read the catalog), the call runs once more in the shard's
new group. New jobs are split by group, one transaction per group (`create_jobs`). The
reads that span jobs (a tenant's jobs, an execution by id alone, a job's history, which may
stay in a group its shard left) ask every group and merge the answers into one order, so a
page is exactly what one database would have answered.

With one group, every call is the single-database call it always was.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from horae.errors import NotFound, QuotaExceeded, ShardMoved
from horae.models import ExecutionStatus, JobSource, JobState
from horae.store import backfills, due, jobs, quotas, reads
from horae.store.backfills import BackfillRow, NewBackfill
from horae.store.due import DueCount
from horae.store.new_jobs import NewJob
from horae.store.rows import CrdJob, ExecutionRow, JobRow

if TYPE_CHECKING:
    from horae.store.db import Conn, Database
    from horae.store.groups import Store

T = TypeVar("T")


def _never(_: object) -> bool:
    return False


async def on_job(
    store: Store,
    job_id: uuid.UUID,
    call: Callable[[Conn], Awaitable[T]],
    *,
    missing: Callable[[T], bool] = _never,
) -> T:
    """`call` on a connection of the job's group. When the job is not there (NotFound, or
    an answer `missing` says is none) and the catalog moved, once more in its new group."""
    retried = False
    while True:
        try:
            async with store.for_job(job_id).acquire() as conn:
                result = await call(conn)
        except NotFound:
            if retried or not await store.moved():
                raise
        else:
            if retried or not missing(result) or not await store.moved():
                return result
        retried = True


async def each_group(store: Store, call: Callable[[Conn], Awaitable[T]]) -> list[tuple[str, T]]:
    """`call` on every group at once; (group, answer) in group order."""

    async def one(db: Database) -> T:
        async with db.acquire() as conn:
            return await call(conn)

    found = store.each()
    answers = await asyncio.gather(*(one(db) for _, db in found))
    return [(group, answer) for (group, _), answer in zip(found, answers, strict=True)]


def _split(store: Store, new: Iterable[NewJob]) -> dict[str, list[NewJob]]:
    by_group: dict[str, list[NewJob]] = {}
    for job in new:
        by_group.setdefault(store.catalog.group_of(store.shard_of(job.job_id)), []).append(job)
    return by_group


async def create_in(store: Store, group: str, new: Sequence[NewJob], *, now: datetime) -> None:
    """Create `new`, all of whose shards are in `group` by the catalog read, in one
    transaction there, within their tenants' quotas summed over every group. ShardMoved
    passes on: the caller re-reads the catalog (`create_jobs` does)."""
    tenants = {j.tenant for j in new}
    elsewhere = await quotas.elsewhere(store, group, tenants, bounded=True)
    async with store.database(group).acquire() as conn:
        try:
            await jobs.create_jobs(
                conn, new, shards=store.catalog.shards, now=now, elsewhere=elsewhere
            )
        except QuotaExceeded:
            if elsewhere is None:
                raise
            # Refused by the other groups' bounds, which may stand above their use: again,
            # with their use counted.
            elsewhere = await quotas.elsewhere(store, group, tenants)
            await jobs.create_jobs(
                conn, new, shards=store.catalog.shards, now=now, elsewhere=elsewhere
            )


async def create_jobs(store: Store, new: Sequence[NewJob], *, now: datetime) -> None:
    """Create `new` in the groups of their shards: one transaction per group, one group
    after another, so a batch is all or none within each group only. A group that answers
    ShardMoved is tried once more after the catalog is read again."""
    for group, part in sorted(_split(store, new).items()):
        try:
            await create_in(store, group, part, now=now)
        except ShardMoved:
            if not await store.moved():
                raise
            for again, rest in sorted(_split(store, part).items()):
                await create_in(store, again, rest, now=now)


async def get_job(store: Store, job_id: uuid.UUID, tenant: str | None = None) -> JobRow:
    """The job (of `tenant`), from its group; NotFound when there is none."""
    return await on_job(store, job_id, lambda conn: reads.get_job(conn, job_id, tenant))


async def find_job(store: Store, job_id: uuid.UUID) -> JobRow | None:
    """The job, of any tenant, or None."""
    return await on_job(
        store, job_id, lambda conn: reads.find_job(conn, job_id), missing=lambda r: r is None
    )


async def find_live_crd_job(store: Store, tenant: str, name: str) -> uuid.UUID | None:
    """The live job of the ScheduledJob NAMESPACE/NAME, whichever group holds it."""
    for _, found in await each_group(store, lambda c: reads.find_live_crd_job(c, tenant, name)):
        if found is not None:
            return found
    return None


async def cancel_crd_namesake(
    store: Store, tenant: str, name: str, *, keep: uuid.UUID, now: datetime
) -> None:
    """Cancel a live CRD job of this name (in whichever group) whose resource was replaced
    while the operator was away."""
    old = await find_live_crd_job(store, tenant, name)
    if old is not None and old != keep:
        await on_job(
            store,
            old,
            lambda conn: jobs.cancel_job(conn, old, now=now, by=JobSource.CRD),
            missing=lambda done: not done,
        )


async def list_jobs(
    store: Store,
    tenant: str,
    *,
    after: tuple[datetime, uuid.UUID] | None,
    limit: int,
    state: JobState | None = None,
) -> list[JobRow]:
    """A tenant's jobs in creation order (created_at, id) after the cursor `after`: `limit`
    from each group, merged, the first `limit` kept; so each page holds exactly the jobs one
    database would have answered, and every job appears once across pages (a job copied
    but not yet deleted by a move in flight is shown once)."""
    pages = await each_group(
        store, lambda c: reads.list_jobs(c, tenant, after=after, limit=limit, state=state)
    )
    seen: dict[uuid.UUID, JobRow] = {}
    for _, rows in pages:
        for row in rows:
            seen.setdefault(row.id, row)
    return sorted(seen.values(), key=lambda r: (r.created_at, r.id))[:limit]


async def live_crd_jobs(store: Store) -> dict[uuid.UUID, CrdJob]:
    """Every ScheduledJob's job that is not cancelled, in every group."""
    found: dict[uuid.UUID, CrdJob] = {}
    for _, rows in await each_group(store, reads.live_crd_jobs):
        found.update((row.id, row) for row in rows)
    return found


async def existing_ids(store: Store, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Those of `ids` that are jobs (in any state), in any group."""
    found: set[uuid.UUID] = set()
    for _, part in await each_group(store, lambda c: reads.existing_ids(c, ids)):
        found |= part
    return found


def _newest(rows: Iterable[ExecutionRow], limit: int) -> list[ExecutionRow]:
    """Executions newest first (due_at, id), each once (a live one copied by a move in
    flight is in two groups for a moment), at most `limit`."""
    seen: dict[uuid.UUID, ExecutionRow] = {}
    for row in rows:
        seen.setdefault(row.id, row)
    return sorted(seen.values(), key=lambda r: (r.due_at, r.id), reverse=True)[:limit]


async def executions_of_job(
    store: Store,
    job_id: uuid.UUID,
    *,
    status: ExecutionStatus | None = None,
    before: tuple[datetime, uuid.UUID] | None = None,
    limit: int = 50,
) -> list[ExecutionRow]:
    """A job's executions, newest first, before the cursor `before`: its live ones from its
    group, and its history from every group (a moved shard's history stays behind)."""
    pages = await each_group(
        store,
        lambda c: reads.for_job(c, job_id, status=status, before=before, limit=limit),
    )
    return _newest((row for _, rows in pages for row in rows), limit)


async def recent_of_job(store: Store, job_id: uuid.UUID, limit: int) -> list[ExecutionRow]:
    """A job's `limit` newest executions past `scheduled`, from every group."""
    pages = await each_group(store, lambda c: reads.recent_of_job(c, job_id, limit))
    return _newest((row for _, rows in pages for row in rows), limit)


async def recent_of_job_by_outcome(
    store: Store, job_id: uuid.UUID, *, succeeded: int, failed: int
) -> list[ExecutionRow]:
    """A job's queued and running executions, its `succeeded` newest succeeded ones and its
    `failed` newest that ended otherwise, from every group; newest first."""
    pages = await each_group(
        store,
        lambda c: reads.recent_of_job_by_outcome(c, job_id, succeeded=succeeded, failed=failed),
    )
    found = [row for _, rows in pages for row in rows]
    live = _newest((r for r in found if not r.status.terminal), len(found))
    ok = _newest((r for r in found if r.status == ExecutionStatus.SUCCEEDED), succeeded)
    other = [r for r in found if r.status.terminal and r.status != ExecutionStatus.SUCCEEDED]
    return _newest([*live, *ok, *_newest(other, failed)], len(found))


async def job_run_times(store: Store, job_id: uuid.UUID) -> tuple[datetime | None, datetime | None]:
    """`reads.job_run_times` over every group (history stays in a group a shard left): the
    latest of each."""
    pages = await each_group(store, lambda c: reads.job_run_times(c, job_id))
    schedules = [s for _, (s, _) in pages if s is not None]
    successes = [t for _, (_, t) in pages if t is not None]
    return max(schedules, default=None), max(successes, default=None)


async def get_execution(
    store: Store, execution_id: uuid.UUID, tenant: str | None
) -> ExecutionRow | None:
    """One execution by id alone: every group is asked; the copy in the group that holds
    its shard now wins over one a move in flight has not yet deleted."""
    found = [
        (group, row)
        for group, row in await each_group(
            store, lambda c: reads.get_execution(c, execution_id, tenant)
        )
        if row is not None
    ]
    for group, row in found:
        if group == store.catalog.group_of(row.shard):
            return row
    return found[0][1] if found else None


async def execution_ids_in_range(
    store: Store, low: uuid.UUID, high: uuid.UUID, limit: int
) -> list[uuid.UUID]:
    """The execution ids from `low` to `high` (inclusive) in every group, at most `limit`,
    in order (one a move in flight holds in two groups counted once)."""
    pages = await each_group(store, lambda c: reads.execution_ids_in_range(c, low, high, limit))
    return sorted({i for _, ids in pages for i in ids})[:limit]


async def create_backfill(
    store: Store, new: NewBackfill, *, now: datetime, tenant: str | None
) -> BackfillRow:
    """A backfill of the job, in its group (where the scheduler owning its shard feeds it)."""
    return await on_job(
        store, new.job_id, lambda c: backfills.create_backfill(c, new, now=now, tenant=tenant)
    )


async def get_backfill(
    store: Store, backfill_id: uuid.UUID, tenant: str | None
) -> tuple[str, BackfillRow]:
    """The backfill (of `tenant`) by id alone, and its group: every group is asked. NotFound
    when none has it."""
    for group, row in await each_group(
        store, lambda c: backfills.get_backfill(c, backfill_id, tenant)
    ):
        if row is not None:
            return group, row
    raise NotFound(f"backfill {backfill_id} not found")


async def cancel_backfill(
    store: Store,
    backfill_id: uuid.UUID,
    *,
    now: datetime,
    tenant: str | None,
    why: str = "cancelled",
) -> BackfillRow:
    """Cancel the backfill (a no-op when it ended already), saying `why`; the backfill as
    it is then."""
    group, _ = await get_backfill(store, backfill_id, tenant)
    async with store.database(group).acquire() as conn:
        await backfills.cancel_backfill(conn, backfill_id, now=now, tenant=tenant, why=why)
        row = await backfills.get_backfill(conn, backfill_id, tenant)
    if row is None:
        raise NotFound(f"backfill {backfill_id} not found")
    return row


async def job_backfills(
    store: Store, job_id: uuid.UUID, tenant: str, limit: int
) -> list[BackfillRow]:
    """A job's backfills, newest first, from its group."""
    return await on_job(store, job_id, lambda c: backfills.job_backfills(c, job_id, tenant, limit))


async def backfill_of_resource(store: Store, uid: str) -> BackfillRow | None:
    """The backfill a Backfill resource made, in whichever group holds it, or None."""
    for _, row in await each_group(store, lambda c: backfills.backfill_of_resource(c, uid)):
        if row is not None:
            return row
    return None


async def due_ahead(store: Store, *, since: datetime, until: datetime) -> list[DueCount]:
    """`due.due_ahead` in every group, each for the shards the catalog places there (a
    shard's pending rows are in its group; one a move in flight holds in two groups for a
    moment is counted twice for that moment, which only scales a pool up a little early)."""

    async def read(group: str) -> list[DueCount]:
        shards = store.catalog.shards_of(group)
        if not shards:
            return []
        async with store.database(group).acquire() as conn:
            return await due.due_ahead(conn, since=since, until=until, shards=shards)

    answers = await asyncio.gather(*(read(group) for group in store.groups()))
    return [row for rows in answers for row in rows]

"""The scheduler's execution transitions: preload a shard's window, take a shard (a new
fencing epoch), record a dispatch round fenced by the epochs held, held from before its
publish to its record (skipped, predecessors to cancel, cron jobs' next occurrences,
BufferOne occurrences left waiting; the published rows stay `scheduled`), and the reaper's:
find published executions still unclaimed (and those earlier releases marked `queued`) to
republish, end those whose lease ran out. Each is a conditional
statement whose row count decides; every write is fenced by the shard's epoch.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Collection, Container, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import asyncpg

from horae.errors import ShardBusy, ShardMoved
from horae.models import ExecutionStatus, JobSpec
from horae.store.boundary import translated, translating
from horae.store.occurrences import CatchUp, Skipped, next_occurrence
from horae.store.queries import Q
from horae.store.rows import ExpiredRun, JobRow, LiveExecution, job_of, retry_policy_of
from horae.store.scheduling import (
    NewExecution,
    insert_execution,
    insert_executions,
    new_execution_id,
)

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
    manual: bool = False
    """Run by hand (a trigger), outside the schedule: never judged by catch-up."""
    backfill: uuid.UUID | None = None
    """The backfill that made it (an old occurrence run now), None for every other run:
    one never schedules its job's next occurrence, nor is judged late for its occurrence."""


CATCH_UP_KIND = "catch_up"
"""The `error_kind` of an occurrence a catch-up policy, window or cap did not run."""

NIL = uuid.UUID(int=0)
"""The smallest id: (due_at, NIL) sorts before every execution due at `due_at`."""
MIN_CURSOR = (datetime(1970, 1, 1, tzinfo=UTC), NIL)


@dataclass(frozen=True, slots=True)
class Notice:
    """What a shard's NOTIFY says of the executions just inserted for it."""

    key: tuple[datetime, uuid.UUID]
    """At or before the smallest new (due_at, id): the scheduler reads from here."""
    made: uuid.UUID | None = None
    """At or before every new id (the smallest one's creation millisecond), so that a
    re-read behind the cursor skips the rows made before them; None when not told."""

    def merged(self, other: Notice) -> Notice:
        """A notice covering both."""
        made = None if self.made is None or other.made is None else min(self.made, other.made)
        return Notice(min(self.key, other.key), made)


def _floor_of(made: str) -> uuid.UUID:
    """The smallest UUIDv7 of a creation millisecond (as a payload carries it)."""
    return uuid.UUID(int=int(made) << 80)


def parse_notify(payload: str) -> Notice | None:
    """A shard NOTIFY's payload: "<due, epoch microseconds> <a creation millisecond>
    [<a creation millisecond>]", the smallest new (due_at, id) of the executions just
    inserted for that shard as its due time and (the smallest UUIDv7 of) its id's creation
    millisecond: a key at or just before the new rows, so the scheduler reads from there,
    and one that sorts ahead of its cursor when the rows are newer than those it has read;
    then, from this release's inserts, the smallest creation millisecond of all the new
    ids. Never an id itself: any database role may LISTEN (migration 004). The "<epoch
    microseconds> <uuid>" of earlier releases is still read. None for any other payload
    (rows moved back to scheduled under their old ids: the shard's window is re-read)."""
    micros, _, rest = payload.partition(" ")
    made, _, first = rest.partition(" ")
    try:
        at = MIN_CURSOR[0] + timedelta(microseconds=int(micros))
        floor = _floor_of(made) if made.isdigit() else uuid.UUID(made)
    except ValueError:
        return None
    return Notice((at, floor), _floor_of(first) if first.isdigit() else None)


@translated
async def preload(
    conn: Conn,
    shards: Sequence[int],
    until: datetime,
    limit: int,
    after: tuple[datetime, uuid.UUID] = MIN_CURSOR,
    made_since: uuid.UUID | None = None,
) -> list[Due]:
    """Pending executions of `shards` due before `until`, after the cursor `after` (with
    `made_since`, only those whose ids are not smaller: made since)."""
    rows = await conn.fetch(
        Q["preload_due"], list(shards), until, after[0], after[1], limit, made_since
    )
    return [Due(**dict(r)) for r in rows]


@translated
async def tenant_limits(conn: Conn, tenants: Sequence[str]) -> dict[str, int]:
    """The `max_running` of those of `tenants` that have one: in this store group, its
    allowance when the rebalancer set one (`allowances`)."""
    rows = await conn.fetch(Q["tenant_limits"], sorted(tenants))
    return {row["name"]: row["max_running"] for row in rows}


@translated
async def tenants_running(conn: Conn, tenants: Sequence[str]) -> dict[str, int]:
    """How many executions of each of `tenants` run right now."""
    rows = await conn.fetch(Q["tenants_running"], sorted(tenants))
    return {row["tenant"]: row["running"] for row in rows}


TAKE_LOCK_TIMEOUT_MS = 500


async def take_shard(conn: Conn, shard: int, owner: str, now: datetime) -> int:
    """Bump the shard's fencing epoch; the caller now owns the shard under the result
    (`take_shards` for one shard)."""
    return (await take_shards(conn, [shard], owner, now))[shard]


@translated
async def take_shards(
    conn: Conn, shards: Sequence[int], owner: str, now: datetime
) -> dict[int, int]:
    """Bump the shards' fencing epochs in one transaction; the caller now owns each shard
    under its epoch in the answer.

    A dispatch of the previous owner holds the epoch (`lock_epochs`) for its transaction:
    a live one for milliseconds, one whose client was cut off until Postgres ends it
    (`IDLE_IN_TRANSACTION_TIMEOUT_MS`). Waiting longer than `TAKE_LOCK_TIMEOUT_MS` raises
    `ShardBusy` (and takes none of them), so that the caller's lease loop goes on renewing
    its other shards, and this one is taken at a later round. `ShardMoved` (none taken)
    when one of them lives in another store group now (the caller re-reads the catalog)."""
    wanted = sorted(set(shards))
    try:
        async with conn.transaction():
            await conn.execute(Q["take_lock_timeout"], str(TAKE_LOCK_TIMEOUT_MS))
            rows = await conn.fetch(Q["take_shards"], wanted, owner, now)
            epochs = {r["shard"]: int(r["epoch"]) for r in rows}
            moved = [s for s in wanted if s not in epochs]
            if moved:
                raise ShardMoved(moved, f"shards {moved} moved out of this store group")
    except asyncpg.LockNotAvailableError as exc:
        raise ShardBusy(f"shards {wanted}: a dispatch of a previous owner holds an epoch") from exc
    return epochs


@translated
async def moved_out(conn: Conn, shard: int) -> bool:
    """Whether `shard` moved out of this store group (a move fenced its dispatch here out)."""
    return bool(await conn.fetchval(Q["shard_moved_out"], shard))


@translated
async def shards_moved_out(conn: Conn) -> set[int]:
    """The shards marked moved out of this store group (a move under way, or one that
    switched the catalog already)."""
    return {r["shard"] for r in await conn.fetch(Q["moved_out_shards"])}


@translated
async def live_of_jobs(
    conn: Conn,
    job_ids: Sequence[uuid.UUID],
    *,
    published: Container[tuple[uuid.UUID, datetime]] = (),
    waiting: Collection[uuid.UUID] = (),
    now: datetime | None = None,
) -> list[LiveExecution]:
    """Queued or running executions of these jobs, with those `published` ((id, due_at)) and
    not claimed yet as queued; and of the jobs `waiting` (BufferOne), the first attempts
    still scheduled and due by `now` that were not published."""
    rows = await conn.fetch(Q["live_executions_of_jobs"], list(job_ids), now)
    live: list[LiveExecution] = []
    for r in rows:
        status = r["status"]
        if status == ExecutionStatus.SCHEDULED:
            if (r["id"], r["due_at"]) in published:
                status = ExecutionStatus.QUEUED.value
            elif r["job_id"] not in waiting or r["attempt"] != 1:
                continue
        live.append(
            LiveExecution(
                r["id"], r["job_id"], r["due_at"], r["occurrence_at"], status, r["lease_owner"]
            )
        )
    return live


@translated
async def still_scheduled(
    conn: Conn, keys: Sequence[tuple[uuid.UUID, datetime, int]], chunk: int = 5_000
) -> list[Due]:
    """Which of these executions ((id, due_at, shard)) are still `scheduled`: published,
    not claimed."""
    found: list[Due] = []
    for i in range(0, len(keys), chunk):
        part = keys[i : i + chunk]
        rows = await conn.fetch(
            Q["still_scheduled"], [k[0] for k in part], [k[1] for k in part], [k[2] for k in part]
        )
        found += [Due(**dict(r)) for r in rows]
    return found


@translated
async def recurring_specs(conn: Conn, job_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, JobSpec]:
    """The specs of those of these jobs that are active cron jobs."""
    rows = await conn.fetch(Q["recurring_jobs"], sorted(set(job_ids)))
    return {job.id: job.spec for job in map(job_of, rows)}


@dataclass(frozen=True)
class Skip:
    due: Due
    kind: str
    message: str
    gap: CatchUp | None = None
    """A catch-up skip: the gap's other skipped occurrences to record, and where the
    schedule resumes (instead of the skipped occurrence's successor)."""


@dataclass(frozen=True)
class ShardDispatch:
    """What one dispatch round did to one shard, under the epoch it holds."""

    epoch: int
    published: Sequence[Due] = ()
    """Executions published (they stay `scheduled` until a worker claims them)."""
    skipped: Sequence[Skip] = ()
    cancel: Sequence[tuple[uuid.UUID, datetime]] = ()
    """Executions a Replace occurrence replaces (`request_cancel`)."""
    held: Sequence[Due] = ()
    """BufferOne occurrences left waiting (still `scheduled`) behind a running one, first
    held: their next occurrences are scheduled now, as if they had been dispatched."""


REPLACED = "concurrencyPolicy=Replace: a later occurrence replaced it before it started"


@dataclass(frozen=True)
class Recorded:
    """What `record_round` wrote."""

    published: int
    """Executions published (left `scheduled` for workers to claim)."""
    stop: Mapping[str, Sequence[uuid.UUID]]
    """Running executions a Replace occurrence replaced, by the worker holding each: to be
    told now (`Publisher.cancel_running`); their marks are committed."""


@asynccontextmanager
async def fenced(conn: Conn, epochs: Mapping[int, int]) -> AsyncIterator[set[int]]:
    """A transaction holding our `epochs` (shard -> epoch) share-locked throughout: yields
    the shards still ours (a shard missing moved on: another replica took it, or it moved
    to another store group). A replica taking a shard, or a move, waits for the
    transaction, so what the caller records inside it for those shards (`record_round`)
    is what the shard's next owner reads. Errors raised in the block roll it back and pass
    as they are."""
    tx = conn.transaction()
    order = sorted(epochs)
    async with translating():
        await tx.start()
        try:
            rows = await conn.fetch(Q["lock_epochs"], order, [epochs[s] for s in order])
        except BaseException:
            await tx.rollback()
            raise
    try:
        yield {r["shard"] for r in rows}
    except BaseException:
        with contextlib.suppress(Exception):
            async with translating():
                await tx.rollback()
        raise
    async with translating():
        await tx.commit()


@translated
async def record_round(conn: Conn, shards: Mapping[int, ShardDispatch], now: datetime) -> Recorded:
    """Inside `fenced`, for shards it answered: record skipped occurrences, end replaced
    predecessors (`request_cancel`), and schedule cron jobs' next occurrences (of the
    ones to publish and the held ones), before anything is published: the dispatcher
    publishes once this is committed. The executions to publish are not written: they
    stay `scheduled` until a worker claims them, so an execution costs no row version
    between its insert and its claim. Their next occurrences are scheduled idempotently
    (a round published already, whose rows were read again, records them again)."""
    ours = [shards[s] for s in sorted(shards)]
    published = [d for plan in ours for d in plan.published]
    skipped = [s for plan in ours for s in plan.skipped]
    done: set[uuid.UUID] = set()
    if skipped:
        rows = await conn.fetch(
            Q["skip_executions"],
            [s.due.id for s in skipped],
            [s.due.due_at for s in skipped],
            [s.kind for s in skipped],
            [s.message for s in skipped],
            now,
        )
        done = {r["id"] for r in rows}
    stop: dict[str, list[uuid.UUID]] = {}
    cancel = [c for plan in ours for c in plan.cancel]
    if cancel:
        ended = await conn.fetch(
            Q["request_cancel"], [c[0] for c in cancel], [c[1] for c in cancel], now, REPLACED
        )
        for row in ended:
            if row["status"] == ExecutionStatus.RUNNING and row["lease_owner"] is not None:
                stop.setdefault(row["lease_owner"], []).append(row["id"])
    held = [d for plan in ours for d in plan.held]
    # A catch-up skip moves the schedule on past its gap, but only if its row was skipped
    # here: a worker that claimed it first (published by an earlier round whose record was
    # lost) runs it, and schedules its successor, as this round does then.
    gaps = {s.due.id: s.gap for s in skipped if s.gap is not None and s.due.id in done}
    await _schedule_next(conn, [*published, *(s.due for s in skipped), *held], now, gaps)
    return Recorded(len(published), stop)


async def record_dispatch(
    conn: Conn, shards: dict[int, ShardDispatch], now: datetime
) -> tuple[int, set[int]]:
    """`fenced` and `record_round` in one, for executions published already: how many were
    recorded as published, and the shards we were fenced out of."""
    async with fenced(conn, {s: plan.epoch for s, plan in shards.items()}) as held:
        recorded = await record_round(conn, {s: shards[s] for s in held}, now)
    return recorded.published, set(shards) - held


@translated
async def stale_queued(
    conn: Conn, shards: Sequence[int], before: datetime, limit: int
) -> list[Due]:
    rows = await conn.fetch(Q["stale_queued"], list(shards), before, limit)
    return [Due(**dict(r)) for r in rows]


@translated
async def touch_queued(
    conn: Conn, shard: int, epoch: int, batch: Sequence[Due], now: datetime
) -> None:
    await conn.execute(
        Q["touch_queued"], shard, epoch, [d.id for d in batch], [d.due_at for d in batch], now
    )


@translated
async def return_unstarted(conn: Conn, epochs: Mapping[int, int], now: datetime) -> int:
    """Fenced by `epochs` (shard -> epoch): executions claimed ahead of their due time whose
    lease ran out before `now` with no outcome recorded go back to `scheduled`, due as they
    were, not an attempt (the store cannot tell whether a handler began: at least once);
    their shards are told. How many."""
    shards = sorted(epochs)
    rows = await conn.fetch(Q["return_unstarted"], shards, [epochs[s] for s in shards], now)
    return sum(r["returned"] for r in rows)


@translated
async def return_unpromised(conn: Conn, epochs: Mapping[int, int], window: timedelta) -> int:
    """Fenced by `epochs` (shard -> epoch): executions claimed ahead whose workers' promises
    ran out more than their grace before their due times (promises that ran out within
    `window`: older claims are left to their leases) go back to `scheduled`, a microsecond
    later (a new key), not an attempt; their shards are told. How many."""
    shards = sorted(epochs)
    rows = await conn.fetch(Q["return_unpromised"], shards, [epochs[s] for s in shards], window)
    return sum(r["returned"] for r in rows)


@translated
async def expired_running(
    conn: Conn, shards: Sequence[int], now: datetime, limit: int
) -> list[ExpiredRun]:
    """Running executions of `shards` whose lease ran out before `now`, oldest lease first."""
    rows = await conn.fetch(Q["expired_running"], list(shards), now, limit)
    return [
        ExpiredRun(**{**dict(r), "retry_policy": retry_policy_of(r["retry_policy"])}) for r in rows
    ]


@translated
async def lose_lease(
    conn: Conn, row: ExpiredRun, *, epoch: int, now: datetime, retry_at: datetime | None
) -> ExecutionStatus | None:
    """Fenced: the expired running execution `row` becomes failed (with a retry at
    `retry_at`) or dead (retry_at None); cancelled, never retried, when it was asked to stop
    (its job cancelled, or a Replace occurrence replaced it). Its job's latest run is
    recorded as a worker's outcome records it (`horae_record_runs`: a dead one counts
    towards the job's failure policy). What it became; None when it is no longer expired or
    not ours."""
    status = ExecutionStatus.FAILED if retry_at is not None else ExecutionStatus.DEAD
    async with conn.transaction():
        lost = await conn.fetchrow(
            Q["lose_lease"], row.id, row.due_at, row.shard, epoch, now, status.value
        )
        if lost is None:
            return None
        status = ExecutionStatus(lost["status"])
        if status == ExecutionStatus.CANCELLED:
            retry_at = None
        if retry_at is not None:
            await insert_execution(
                conn,
                job_id=row.job_id,
                tenant=row.tenant,
                task=row.task,
                shard=row.shard,
                due_at=retry_at,
                occurrence_at=row.occurrence_at,
                attempt=row.attempt + 1,
                job_version=row.job_version,
                now=now,
                manual=row.manual,
            )
        await conn.execute(
            Q["record_job_runs"],
            [row.job_id],
            [status.value],
            [retry_at is None],
            [row.id],
            [lost["error_message"]],
            now,
        )
        return status


async def _schedule_next(
    conn: Conn,
    dues: Sequence[Due],
    now: datetime,
    gaps: Mapping[uuid.UUID, CatchUp] | None = None,
) -> None:
    """Insert the next occurrence of each active cron job among `dues` (first attempts, not
    backfilled): the successor of its latest, or for one skipped by catch-up (`gaps`, by
    execution id) the occurrence its gap resumes at, after recording the gap's other skipped
    occurrences.

    One query finds which jobs recur, one inserts their next occurrences and one records
    them on the jobs, so a spike costs the same three statements whatever its size (and
    one more for the skipped rows of gaps).
    """
    # Per job, the latest occurrence (later ones overwrite): a batch may also hold a stale
    # copy of an earlier one (re-read before a worker claimed it), whose next one exists.
    # A backfilled occurrence is a past one run now: the schedule goes on without it.
    ordered = sorted(
        (d for d in dues if d.attempt == 1 and d.backfill is None), key=lambda d: d.occurrence_at
    )
    firsts = {d.job_id: d for d in ordered}
    if not firsts:
        return
    new: list[NewExecution] = []
    missed: list[tuple[JobRow, Skipped]] = []
    for job in map(job_of, await conn.fetch(Q["recurring_jobs"], sorted(firsts))):
        gap = (gaps or {}).get(firsts[job.id].id)
        if gap is not None:
            missed += [(job, s) for s in gap.skipped]
            nxt = gap.resume
        else:
            nxt = next_occurrence(job.id, job.spec, firsts[job.id].occurrence_at)
        if nxt is not None:
            new.append(
                NewExecution(
                    job.id,
                    job.tenant,
                    job.task,
                    job.shard,
                    nxt.due_at,
                    nxt.occurrence_at,
                    1,
                    job.spec_version,
                )
            )
    if missed:
        await conn.execute(
            Q["insert_skipped"],
            [new_execution_id() for _ in missed],
            [job.id for job, _ in missed],
            [job.tenant for job, _ in missed],
            [job.task for job, _ in missed],
            [job.shard for job, _ in missed],
            [s.occurrence.occurrence_at for _, s in missed],
            [job.spec_version for job, _ in missed],
            now,
            [CATCH_UP_KIND] * len(missed),
            [s.message for _, s in missed],
        )
    if new:
        await insert_executions(conn, new, now)
        await conn.execute(
            Q["set_next_runs"], [n.job_id for n in new], [n.occurrence_at for n in new], now
        )

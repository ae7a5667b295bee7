"""Growing the store online: add a group, move shards between groups, report on them.

Moving shards from group A to group B (`move_shards`), all of it under the catalog's lock:

1. In A: the shards' epochs are bumped and marked moved out, committed (a dispatch of theirs
   in A is fenced out; they can no longer be taken or get new jobs there).
2. In A, one transaction that stays open: their live executions (scheduled, queued, running)
   and jobs are read and locked, so no claim, heartbeat, outcome or edit changes them
   meanwhile: those wait. Executions first, as an outcome locks its execution and then its
   job; an edit locks the other way round, so a deadlock with one (Postgres aborts the move)
   or a lock wait run out starts this step again, up to `MOVE_ATTEMPTS` times. Then the
   executions are read again until a read finds none new: a writer the first read waited
   for may have inserted some (an outcome's retry).
3. In B, one transaction: what a failed move may have left there is cleared, the rows are
   copied, each limited tenant's allowance there grows by the running executions it
   brings, the shards get a new epoch there, and their schedulers are told to re-read.
4. In the catalog: the shards are placed in B; the new version is announced
   (NOTIFY horae_catalog).
5. A's transaction deletes the moved rows, shrinks those allowances there by as many (under
   the tenants' claim locks, taken in step 2 after the rows) and commits. A writer that
   waited on them finds them gone, reads the catalog again (it has moved on) and writes to
   B. A tenant's allowances so add up to its limit throughout, and its running executions
   stay within them (the allowance rebalancer is kept out meanwhile).

History (ended executions) stays in A, readable: reads by job or by id ask every group, and
retention drops it in time. A failure before step 4 rolls A back and unmarks the shards
there, leaving B's copy unreferenced; one after it leaves A's copy fenced (nothing can be
dispatched or created there). Every move starts by repairing both (`_repair`), so running
the move again is the remedy. Moves are serialised by a session advisory lock.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeAlias

import asyncpg

from horae.errors import ConfigError
from horae.store.boundary import translated
from horae.store.db import SERVER_SETTINGS, connect
from horae.store.dispatch import shards_moved_out
from horae.store.groups import Catalog, address_of, group_url, read_catalog
from horae.store.installation import read_installation
from horae.store.migrate import GroupMigrated, migrate_group
from horae.store.queries import Q

log = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(UTC)


Connection: TypeAlias = "asyncpg.Connection[asyncpg.Record]"

MOVE_LOCK_TIMEOUT_MS = 10_000
"""How long a move waits for the rows it must lock (a dispatch or a claim holds them for
milliseconds; a client cut off mid-transaction, until Postgres ends its session)."""

MOVE_ATTEMPTS = 3
"""How many times a move locks and copies the rows, the source fenced all along, when
Postgres aborts it to break a deadlock with a writer or its lock wait runs out."""

MOVE_REREADS = 5
"""How many times a move reads the live executions again for rows writers added while it
waited for their locks (`_all_live`): a read finds new ones only if a writer it waited for
added some, so two reads are the rule; past the last, the move fails and unfences."""

LOCKING: tuple[type[BaseException], ...] = (
    asyncpg.DeadlockDetectedError,
    asyncpg.LockNotAvailableError,
)


@dataclass(frozen=True)
class Moved:
    shards: list[int]
    source: str
    target: str
    jobs: int
    executions: int
    paused: timedelta
    """How long the shards' rows were locked (their dispatch and claims waited)."""


@translated
async def add_group(home_url: str, name: str, url: str, *, ahead_days: int = 3) -> GroupMigrated:
    """Migrate the database at `url` as store group `name` (with the installation's settings)
    and add it to the catalog, holding no shards yet."""
    address = address_of(url)
    home = await connect(home_url)
    try:
        installation = await read_installation(home)
        catalog = await read_catalog(home)
        if name in catalog.addresses:
            raise ConfigError(f"store group {name!r} exists already")
        if any(a is not None and address_of(a) == address for a in catalog.addresses.values()):
            raise ConfigError(f"store group URL {address}: that database is a group already")
        applied, _, dropped = await migrate_group(
            url,
            shards=installation.shards,
            retention_days=installation.retention_days,
            ahead_days=ahead_days,
            today=_now().date(),
            catalog=False,
        )
        async with home.transaction():
            await home.execute(Q["lock_catalog"])
            if not await home.fetchval(Q["add_group"], name, address):
                raise ConfigError(f"store group {name!r} exists already")
            await home.fetchval(Q["bump_catalog"])
        return GroupMigrated(name, applied, dropped)
    finally:
        await home.close()


@translated
async def move_shards(home_url: str, shards: Sequence[int], target: str) -> list[Moved]:
    """Move `shards` into group `target`, one source group at a time (see the module). First
    repairs what a failed move may have left in any group."""
    home = await connect(home_url)
    try:
        await home.execute(Q["lock_catalog_session"])
        await home.execute(Q["lock_allowances_session"])
        catalog = await read_catalog(home)
        _check_move(catalog, shards, target)
        await _repair(home_url, catalog)
        moves: list[Moved] = []
        by_source: dict[str, list[int]] = {}
        for s in sorted(set(shards)):
            if catalog.group_of(s) != target:
                by_source.setdefault(catalog.group_of(s), []).append(s)
        for source, moving in sorted(by_source.items()):
            moves.append(await _move(home, home_url, catalog, moving, source, target))
        return moves
    finally:
        await home.close()


def _check_move(catalog: Catalog, shards: Sequence[int], target: str) -> None:
    if target not in catalog.addresses:
        raise ConfigError(
            f"store group {target!r} does not exist (groups: {', '.join(catalog.groups())})"
        )
    bad = sorted(s for s in shards if not 0 <= s < catalog.shards)
    if bad:
        raise ConfigError(f"shards {bad}: this installation has shards 0..{catalog.shards - 1}")


async def _repair(home_url: str, catalog: Catalog) -> None:
    """In each group: a shard marked moved out that the catalog still places there (a move
    that failed before the switch) is unmarked; the live rows and jobs of shards placed
    elsewhere (a move that failed after it, or a copy never switched to) are cleared."""
    for group in catalog.groups():
        conn = await _raw(group_url(group, catalog.addresses[group], home_url))
        try:
            marked = await shards_moved_out(conn)
            here = set(catalog.shards_of(group))
            elsewhere = sorted(set(range(catalog.shards)) - here)
            async with conn.transaction():
                await conn.execute(Q["unfence_shards"], sorted(marked & here))
                await conn.execute(Q["clear_live_executions"], elsewhere)
                await conn.execute(Q["clear_jobs"], elsewhere)
        finally:
            await conn.close()


async def _move(
    home: Connection, home_url: str, catalog: Catalog, shards: list[int], source: str, target: str
) -> Moved:
    """1. fence the source (committed: from now on nothing new starts there); 2. lock and
    read the rows there; 3. copy them to the target (committed); 4. switch the catalog
    (committed); 5. delete them at the source (committed). A failure before 4 unfences the
    source; one after it leaves fenced leftovers the next move's repair clears."""
    owner = f"move:{source}->{target}"
    # Raw connections (json as text, as stored): rows are copied as they are, in binary COPY.
    src = await _raw(group_url(source, catalog.addresses[source], home_url))
    dst = await _raw(group_url(target, catalog.addresses[target], home_url))
    try:
        started = _now()
        async with src.transaction():
            await src.execute(Q["move_lock_timeout"], str(MOVE_LOCK_TIMEOUT_MS))
            await src.execute(Q["fence_shards_out"], shards, owner, started)
        switched = False
        try:
            for attempt in range(1, MOVE_ATTEMPTS + 1):
                try:
                    async with src.transaction():
                        await src.execute(Q["move_lock_timeout"], str(MOVE_LOCK_TIMEOUT_MS))
                        executions = await src.fetch(Q["moving_executions"], shards)
                        jobs = await src.fetch(Q["moving_jobs"], shards)
                        executions = await _all_live(src, shards, executions)
                        carried = await _lock_carried(src, executions)
                        await _copy_in(dst, shards, owner, started, jobs, executions, carried)
                        async with home.transaction():
                            await home.execute(Q["place_shards"], shards, target)
                            await home.fetchval(Q["bump_catalog"])
                        switched = True
                        await src.execute(Q["clear_live_executions"], shards)
                        await src.execute(Q["clear_jobs"], shards)
                        await src.execute(Q["carry_allowances_out"], *_columns(carried))
                    break
                except LOCKING as exc:
                    if switched or attempt == MOVE_ATTEMPTS:
                        raise
                    log.info(
                        "moving shards %s: %s (attempt %d of %d); again",
                        shards, type(exc).__name__, attempt, MOVE_ATTEMPTS,
                    )  # fmt: skip
                    await asyncio.sleep(0.1 * attempt)
        except BaseException:
            if not switched:
                await src.execute(Q["unfence_shards"], shards)
            raise
        paused = _now() - started
        log.debug(
            "moved shards %s from %s to %s: %d jobs, %d live executions, %.2fs",
            shards, source, target, len(jobs), len(executions), paused.total_seconds(),
        )  # fmt: skip
        return Moved(shards, source, target, len(jobs), len(executions), paused)
    finally:
        await src.close()
        await dst.close()


async def _all_live(
    src: Connection, shards: list[int], read: list[asyncpg.Record]
) -> list[asyncpg.Record]:
    """Every live execution of `shards`, locked: `read` (the first read) and what writers
    added since. A writer that held one of the rows when that read reached it, or the row's
    job when the jobs were read, committed before the read went on, and rows it inserted
    (an outcome's retry, a claim's next occurrence of a cron job, a trigger's run) are not in
    that read's snapshot: the step 5 delete, which takes every live row of the shards, would
    take them uncopied. So the rows are read again, each read a fresh snapshot, until one
    finds none new. Then no writer can add one: each would need a row or a job held here,
    and the rest are fenced (step 1)."""
    for _ in range(MOVE_REREADS):
        again: list[asyncpg.Record] = await src.fetch(Q["moving_executions"], shards)
        if {r["id"] for r in again} == {r["id"] for r in read}:
            return again
        read = again
    raise RuntimeError(
        f"moving shards {shards}: live executions still appeared after {MOVE_REREADS} reads"
    )


async def _lock_carried(src: Connection, executions: Sequence[asyncpg.Record]) -> dict[str, int]:
    """The limited tenants' running executions among those moving, by tenant, each tenant's
    claim lock taken in the source (after the rows, in the order a claim takes them): no
    claim there counts its running executions until the move has lowered its allowance."""
    limited = {r["name"] for r in await src.fetch(Q["limited_tenants"])}
    carried = Counter(
        r["tenant"] for r in executions if r["status"] == "running" and r["tenant"] in limited
    )
    for tenant in sorted(carried):
        await src.execute(Q["lock_tenant"], tenant)
    return dict(sorted(carried.items()))


def _columns(carried: dict[str, int]) -> tuple[list[str], list[int]]:
    return list(carried), list(carried.values())


async def _copy_in(
    dst: Connection,
    shards: list[int],
    owner: str,
    started: datetime,
    jobs: Sequence[asyncpg.Record],
    executions: Sequence[asyncpg.Record],
    carried: dict[str, int],
) -> None:
    """One transaction in the target: what a failed move left cleared, the rows copied (the
    leases of the running ones lengthened by how long the move has held them: their
    workers' heartbeats could not reach them meanwhile), the limited tenants' allowances
    grown by the running executions they bring, the shards given a new epoch there, their
    schedulers told."""
    async with dst.transaction():
        await dst.execute(Q["clear_live_executions"], shards)
        await dst.execute(Q["clear_jobs"], shards)
        await _copy(dst, "jobs", jobs)
        await dst.execute(Q["forget_tenant_use"])
        await _copy(dst, "executions", executions)
        await dst.execute(Q["lengthen_moved_leases"], shards, _now() - started)
        await dst.execute(Q["carry_allowances_in"], *_columns(carried))
        await dst.execute(Q["fence_shards_in"], shards, owner, started)
        await dst.execute(Q["announce_shards"], shards)


async def _raw(dsn: str) -> Connection:
    conn: Connection = await asyncpg.connect(dsn, server_settings=SERVER_SETTINGS)
    return conn


async def _copy(conn: Connection, table: str, rows: Sequence[asyncpg.Record]) -> None:
    if not rows:
        return
    columns = list(rows[0].keys())
    await conn.copy_records_to_table(table, records=[tuple(r) for r in rows], columns=columns)


def rebalanced(catalog: Catalog) -> dict[int, str]:
    """The fewest moves that even out the shards over the groups (each group then holds
    ⌊n/g⌋ or ⌈n/g⌉ shards; those holding most keep the extra ones):
    shard → its new group."""
    held = {g: catalog.shards_of(g) for g in catalog.groups()}
    groups = sorted(held, key=lambda g: (-len(held[g]), g))
    base, extra = divmod(catalog.shards, len(groups))
    want = {g: base + (1 if i < extra else 0) for i, g in enumerate(groups)}
    spare = [s for g in groups for s in held[g][want[g] :]]
    moves: dict[int, str] = {}
    for g in groups:
        for _ in range(max(0, want[g] - len(held[g]))):
            moves[spare.pop(0)] = g
    return moves


@dataclass(frozen=True)
class GroupStatus:
    """One group as `horae store status` shows it."""

    group: str
    address: str | None
    shards: list[int]
    jobs: int | None = None
    live: int | None = None
    """Executions not yet ended (scheduled, queued, running) of the shards it holds."""
    executions: int | None = None
    """All its executions, history included (the planner's estimate)."""
    lag: timedelta | None = None
    """How long its oldest overdue scheduled execution has waited (zero: none waits)."""
    bytes: int | None = None
    error: str | None = None
    """Why it could not be read (unreachable, ...): the other figures are then None."""


async def store_status(home_url: str) -> tuple[Catalog, list[GroupStatus]]:
    """The catalog, and each group's rows and dispatch lag (an unreachable group says why,
    and the others are still read)."""
    home = await connect(home_url)
    try:
        catalog = await read_catalog(home)
    finally:
        await home.close()
    report = []
    for group in catalog.groups():
        address = catalog.addresses[group]
        shards = catalog.shards_of(group)
        try:
            conn = await connect(group_url(group, address, home_url))
            try:
                row = await conn.fetchrow(Q["group_rows"], shards)
            finally:
                await conn.close()
        except Exception as exc:  # one group down must not hide the others
            report.append(GroupStatus(group, address, shards, error=f"{type(exc).__name__}: {exc}"))
            continue
        assert row is not None
        oldest = row["oldest_due"]
        report.append(
            GroupStatus(
                group,
                address,
                shards,
                jobs=row["jobs"],
                live=row["live"],
                executions=row["executions_estimate"],
                lag=max(timedelta(), _now() - oldest) if oldest else timedelta(),
                bytes=row["bytes"],
            )
        )
    return catalog, report

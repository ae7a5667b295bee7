"""The scheduler over store groups: a dispatcher, a LISTEN connection, a reaper and a backfill
feeder per group.

Each group's parts work on that group's database alone (its own heap, cursor, epochs and
tenant gate), so no dispatch transaction spans two groups. A shard Lease gained is taken in
the group the catalog places the shard in; when the catalog changes (`horae store move`),
each held shard whose group changed is dropped from the old group's parts and taken in the
new one's, under a new epoch there. The old group's epoch was bumped by the move, so a
dispatch there still holding it is fenced out: that fence is expected and keeps the shard's
Lease, where any other fence gives it up (another replica took the shard).

`HORAE_PRELOAD_MAX_ROWS` bounds the replica's memory, so it is split evenly over the
groups: each group's dispatcher holds at most its share (resized when a group is added).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from horae.errors import HoraeError, ShardBusy, ShardMoved
from horae.scheduler.backfill import Feeder
from horae.scheduler.dispatcher import Dispatcher
from horae.scheduler.leases import NotYet
from horae.scheduler.listener import ShardListener
from horae.scheduler.reaper import Reaper
from horae.store import dispatch
from horae.store.groups import Store

log = logging.getLogger(__name__)

FOLLOW_EVERY = 0.2
"""Seconds between looks at the catalog's version in memory (`Store.follow` re-reads it)."""


@dataclass
class GroupParts:
    """One store group's share of the scheduler."""

    group: str
    dispatcher: Dispatcher
    listener: ShardListener
    reaper: Reaper
    feeder: Feeder | None = None
    """Feeds the running backfills of the group's held shards (none in some tests)."""
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self, stop: asyncio.Event) -> None:
        name = self.group
        self.tasks = [
            asyncio.create_task(self.listener.run(stop), name=f"listener-{name}"),
            asyncio.create_task(self.dispatcher.run_refresh(stop), name=f"refresh-{name}"),
            asyncio.create_task(self.dispatcher.run_dispatch(stop), name=f"dispatch-{name}"),
            asyncio.create_task(self.reaper.run(stop), name=f"reaper-{name}"),
        ]
        if self.feeder is not None:
            self.tasks.append(asyncio.create_task(self.feeder.run(stop), name=f"backfill-{name}"))


Build = Callable[[str, "Fenced"], GroupParts]
"""Makes a group's parts: (group, what its dispatcher calls when fenced out of a shard)."""
Fenced = Callable[[int], Awaitable[None]]


async def take_shard(dispatcher: Dispatcher, listener: ShardListener, shard: int) -> None:
    """Start dispatching a shard just won: LISTEN on its channel first, then read its window.
    A row committed after the read announces itself to a channel already listened on; in the
    other order, one committed between the read and the LISTEN (due soon, so behind the
    cursor) waited for the next full re-read, up to 30 s: the 28 s start lag seen after a
    scheduler was killed under load."""
    await listener.add(shard)
    try:
        await dispatcher.gain(shard)
    except ShardBusy:
        raise NotYet("a dispatch of its previous owner still holds its epoch") from None


class ShardRouter:
    """Which group's parts dispatch each held shard, kept in step with the catalog."""

    def __init__(self, store: Store, build: Build, *, max_rows: int) -> None:
        self._store = store
        self._build = build
        self._max_rows = max_rows
        self._parts: dict[str, GroupParts] = {}
        self.held: dict[int, str] = {}
        """Each shard this replica holds a Lease of: the group it was taken in."""
        self._locks: dict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        """One per shard: its gain, loss and moves between groups happen one at a time (the
        lease loop takes many shards at once)."""
        self._version = store.catalog.version
        self._moving_out: dict[int, str] = {}
        """Shards whose dispatch a move fenced out before the catalog placed them elsewhere:
        the group they are held in (`recheck`)."""
        self._stop: asyncio.Event | None = None
        self.release: Fenced | None = None
        """Gives a shard's Lease up (the lease loop's); set once the lease loop exists."""
        self.watch: Callable[[list[asyncio.Task[None]]], None] = lambda _tasks: None
        """Told of every group's parts' tasks as they start (the process's `Supervisor`)."""

    def parts(self, group: str) -> GroupParts:
        """The group's parts, made (and started, once running) at first use."""
        parts = self._parts.get(group)
        if parts is None:

            async def fenced(shard: int) -> None:
                await self._fenced(group, shard)

            parts = self._parts[group] = self._build(group, fenced)
            if self._stop is not None:
                parts.start(self._stop)
                self.watch(parts.tasks)
            share = max(1, self._max_rows // len(self._parts))
            for each in self._parts.values():
                each.dispatcher.resize(share)
            log.info(
                "store group %s: dispatching its shards (each group %d rows at most)", group, share
            )
        return parts

    def all_parts(self) -> list[GroupParts]:
        return [self._parts[g] for g in sorted(self._parts)]

    def start(self, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        """Start every group's parts (and those of groups added later), and the follower."""
        self._stop = stop
        for group in self._store.groups():
            self.parts(group)
        for parts in self._parts.values():
            if not parts.tasks:
                parts.start(stop)
                self.watch(parts.tasks)
        return [asyncio.create_task(self.run(stop), name="follow-groups")]

    def tasks(self) -> list[asyncio.Task[None]]:
        return [t for parts in self._parts.values() for t in parts.tasks]

    # -- the lease loop's callbacks ---------------------------------------------
    async def gain(self, shard: int) -> None:
        async with self._locks[shard]:
            await self._take(shard)

    async def _take(self, shard: int) -> None:
        group = self._store.catalog.group_of(shard)
        parts = self.parts(group)
        self.held[shard] = group  # a failure below releases the Lease, which drops it here
        try:
            await take_shard(parts.dispatcher, parts.listener, shard)
        except ShardMoved:
            await self._store.moved()
            raise NotYet(f"it moved out of store group {group}; taken in its new one") from None

    async def lose(self, shard: int) -> None:
        async with self._locks[shard]:
            group = self.held.pop(shard, None)
            if group is not None:
                await self._drop(group, shard)

    async def _drop(self, group: str, shard: int) -> None:
        parts = self.parts(group)
        await parts.dispatcher.lose(shard)
        await parts.listener.remove(shard)

    async def _fenced(self, group: str, shard: int) -> None:
        """`group`'s dispatch was fenced out of `shard`: expected when the shard has moved to
        another group (it is then taken there), else another replica took it."""
        if self.held.get(shard) != group:
            return  # moved on already: the fence is the move's
        try:
            await self._store.moved()  # the catalog, re-read if it changed
            if self._store.catalog.version != self._version:  # (maybe by `Store.follow`)
                await self.follow()
        except HoraeError:
            log.warning("cannot read the store catalog after a fence", exc_info=True)
        if self.held.get(shard) != group:
            return
        if await self._moved_out(group, shard):
            # The catalog has not caught up with the move yet: taken in the new group as
            # soon as it does (`run`), under the Lease held meanwhile; or here again, should
            # the move fail instead (`recheck`).
            log.info("shard %d moved out of store group %s", shard, group, extra={"shard": shard})
            self._moving_out[shard] = group
        elif self.release is not None:
            await self.release(shard)

    async def _moved_out(self, group: str, shard: int) -> bool:
        try:
            async with self._store.database(group).acquire() as conn:
                return await dispatch.moved_out(conn, shard)
        except HoraeError:
            return False

    async def recheck(self) -> None:
        """The shards a move fenced out whose catalog switch has not come: those the move
        has given up on (no longer marked moved out, the catalog unchanged) are taken again
        in their group under a new epoch; their Lease is given up when that fails."""
        by_group: dict[str, list[int]] = {}
        for shard, group in sorted(self._moving_out.items()):
            if self.held.get(shard) != group:
                del self._moving_out[shard]  # moved by `follow`, or lost
            else:
                by_group.setdefault(group, []).append(shard)
        for group, shards in sorted(by_group.items()):
            try:
                async with self._store.database(group).acquire() as conn:
                    marked = await dispatch.shards_moved_out(conn)
            except HoraeError:
                continue  # looked at again next round
            for shard in shards:
                if shard not in marked:
                    await self._retake(group, shard)

    async def _retake(self, group: str, shard: int) -> None:
        async with self._locks[shard]:
            if self._moving_out.pop(shard, None) != group or self.held.get(shard) != group:
                return
            log.warning(
                "shard %d: its move out of store group %s failed; taking it again there",
                shard, group, extra={"shard": shard},
            )  # fmt: skip
            if await self._take_anew(group, shard):
                return
        if self.release is not None:
            await self.release(shard)

    async def _take_anew(self, group: str, shard: int) -> bool:
        """Drop `shard`'s dispatch in `group` and take it in the group the catalog places it
        in (the same one when a move failed); False, logged, when it cannot be taken yet."""
        await self._drop(group, shard)
        try:
            await self._take(shard)
        except (NotYet, HoraeError) as exc:
            now_in = self._store.catalog.group_of(shard)
            log.warning("shard %d not taken in %s yet: %s", shard, now_in, exc)
            return False
        return True

    # -- the catalog -------------------------------------------------------------
    async def follow(self) -> None:
        """Bring every held shard to the group the catalog places it in now, and start the
        parts of groups added. A shard that cannot be taken in its new group yet gives its
        Lease up, to be taken again at a later round."""
        catalog = self._store.catalog
        for group in catalog.groups():
            self.parts(group)
        moving = [s for s, g in sorted(self.held.items()) if catalog.group_of(s) != g]
        failed = [s for s in await asyncio.gather(*(self._move(s) for s in moving)) if s >= 0]
        self._version = catalog.version
        for shard in failed:
            if self.release is not None:
                await self.release(shard)

    async def _move(self, shard: int) -> int:
        """Take `shard` in the group the catalog now places it in; -1, or the shard when it
        could not be taken there yet."""
        async with self._locks[shard]:
            group, now_in = self.held.get(shard), self._store.catalog.group_of(shard)
            if group is None or group == now_in:
                return -1  # lost meanwhile, or moved already
            log.info("shard %d moved from %s to %s", shard, group, now_in, extra={"shard": shard})
            return -1 if await self._take_anew(group, shard) else shard

    async def run(self, stop: asyncio.Event) -> None:
        """Follow the catalog `Store.follow` keeps up to date."""
        while not stop.is_set():
            try:
                if self._store.catalog.version != self._version:
                    await self.follow()
                if self._moving_out:
                    await self.recheck()
            except Exception:  # the loop must outlive any one failure
                log.exception("following the store catalog failed; retrying")
            try:
                await asyncio.wait_for(stop.wait(), timeout=FOLLOW_EVERY)
            except TimeoutError:
                pass

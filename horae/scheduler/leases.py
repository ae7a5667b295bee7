"""Shard ownership through Kubernetes Leases.

Each replica renews a member Lease (`horae-member-<identity>`) and holds at most
ceil(shards / live members) shard Leases (`horae-shard-NN`). Expiry is judged
the way client-go's leader election does: by how long a Lease's
resourceVersion has stayed unchanged on this replica's own monotonic clock,
so clock skew between machines does not matter. Leases without a holder are
free at once, which is how SIGTERM hands shards over in well under a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from horae.errors import LeaseConflict
from horae.kube import Lease, Leases

log = logging.getLogger(__name__)

RELEASE_PASSES = 3
"""How many times a stopping replica looks for shard Leases it still holds."""


class NotYet(Exception):
    """Raised by `on_gained` for a shard that cannot be started yet (its previous owner
    still holds it in the store): released without a traceback, and taken again later."""


SHARD_LABEL = "horae.dev/shard-lease"
MEMBER_LABEL = "horae.dev/scheduler-member"


def frees_shards(event: str, lease: Lease) -> bool:
    """Does this Lease change free a shard, or grow the others' fair share?"""
    return event == "DELETED" or lease.holder is None


def shard_lease_name(shard: int) -> str:
    return f"horae-shard-{shard:02d}"


def member_lease_name(identity: str) -> str:
    return f"horae-member-{identity}"[:253]


@dataclass
class _Seen:
    resource_version: str
    since: float


class ShardLeases:
    """Acquires, renews, rebalances and releases this replica's shard Leases."""

    def __init__(
        self,
        leases: Leases,
        *,
        identity: str,
        shards: int,
        lease_duration: float,
        renew_period: float,
        on_gained: Callable[[int], Awaitable[None]],
        on_lost: Callable[[int], Awaitable[None]],
        on_tick: Callable[[], None] = lambda: None,
    ) -> None:
        self._leases = leases
        self.identity = identity
        self.shards = shards
        self._duration = lease_duration
        self._duration_s = max(1, math.ceil(lease_duration))
        self._renew = renew_period
        self._on_gained = on_gained
        self._on_lost = on_lost
        self._on_tick = on_tick
        """Called after each completed tick (the scheduler's readiness: it took part in a
        round of shard Leases, and holds `held`)."""
        self._seen: dict[str, _Seen] = {}
        self.held: dict[int, Lease] = {}
        self._renewed: dict[int, float] = {}
        self.live_members = 1
        self.wake = asyncio.Event()
        """Set to run the next tick at once (a Lease was released or a member left)."""

    def valid(self, shard: int) -> bool:
        """Held and renewed within the lease duration by our own clock (safe to dispatch)."""
        renewed = self._renewed.get(shard)
        return (
            shard in self.held
            and renewed is not None
            and (time.monotonic() - renewed < self._duration)
        )

    def _expired(self, lease: Lease, now: float) -> bool:
        seen = self._seen.get(lease.name)
        if seen is None or seen.resource_version != lease.resource_version:
            self._seen[lease.name] = _Seen(lease.resource_version, now)
            return False
        return now - seen.since > self._duration

    async def tick(self) -> None:
        """One renew period's work: renew, count members, take or shed to the fair share."""
        now = time.monotonic()
        members = await self._leases.list(MEMBER_LABEL)
        member = await self._renew_member(members)
        live = [m for m in members if m.name == member or not self._expired(m, now)]
        self.live_members = max(1, len(live))
        fair = math.ceil(self.shards / self.live_members)

        current = {lease.name: lease for lease in await self._leases.list(SHARD_LABEL)}
        for lease in current.values():
            self._expired(lease, now)  # start every Lease's expiry clock, not just candidates'

        # Renew what we hold (concurrently); whatever changed hands under us is lost.
        async def renew(shard: int, mine: Lease) -> None:
            lease = current.get(mine.name)
            if lease is None or lease.holder != self.identity:
                await self._lose(shard)
                return
            try:
                renewed = await self._leases.write(
                    lease, self.identity, self._duration_s, acquire=False
                )
            except LeaseConflict:
                await self._lose(shard)
                return
            if shard not in self.held:
                # Released while this renewal was in flight (fenced out, shed): its release
                # wrote the version renewed here and conflicted, so hand it back now rather
                # than hold, and renew for ever, a shard nothing dispatches.
                with contextlib.suppress(LeaseConflict):
                    await self._leases.write(renewed, None, self._duration_s, acquire=False)
                return
            self.held[shard] = renewed
            self._renewed[shard] = now

        await asyncio.gather(*(renew(s, m) for s, m in list(self.held.items())))

        # Shed extras so newcomers get their share.
        extras = sorted(self.held)[fair:]
        await asyncio.gather(*(self.release(s) for s in extras))

        # Take free or expired shards up to the fair share (concurrently, in rounds).
        free = [
            s
            for s in range(self.shards)
            if s not in self.held and self._takeable(current.get(shard_lease_name(s)), now)
        ]
        random.shuffle(free)
        while free and len(self.held) < fair:
            round_, free = free[: fair - len(self.held)], free[fair - len(self.held) :]
            await asyncio.gather(
                *(self._try_take(s, current.get(shard_lease_name(s)), now) for s in round_)
            )
        self._on_tick()

    async def _renew_member(self, members: list[Lease]) -> str:
        name = member_lease_name(self.identity)
        existing = next((m for m in members if m.name == name), None)
        try:
            if existing is None:
                await self._leases.create(
                    name, self.identity, self._duration_s, {MEMBER_LABEL: "true"}
                )
            else:
                await self._leases.write(existing, self.identity, self._duration_s, acquire=False)
        except LeaseConflict:
            pass  # raced with ourselves after a restart; next tick renews
        return name

    def _takeable(self, lease: Lease | None, now: float) -> bool:
        return (
            lease is None
            or lease.holder is None
            or lease.holder == self.identity
            or self._expired(lease, now)
        )

    async def _try_take(self, shard: int, lease: Lease | None, now: float) -> None:
        try:
            if lease is None:
                taken = await self._leases.create(
                    shard_lease_name(shard),
                    self.identity,
                    self._duration_s,
                    {SHARD_LABEL: "true"},
                )
            elif self._takeable(lease, now):
                taken = await self._leases.write(
                    lease, self.identity, self._duration_s, acquire=True
                )
            else:
                return
        except LeaseConflict:
            return
        self.held[shard] = taken
        self._renewed[shard] = now
        log.info("took shard %d", shard, extra={"shard": shard})
        try:
            await self._on_gained(shard)
        except NotYet as exc:
            log.warning(
                "shard %d cannot start yet (%s); releasing it", shard, exc, extra={"shard": shard}
            )
            await self.release(shard)
        except Exception:
            log.exception("could not start shard %d; releasing it", shard)
            await self.release(shard)

    async def _lose(self, shard: int) -> None:
        self.held.pop(shard, None)
        log.warning("lost shard %d", shard, extra={"shard": shard})
        await self._on_lost(shard)

    async def release(self, shard: int) -> None:
        """Give a shard up: stop dispatching it, then clear the Lease's holder."""
        lease = self.held.pop(shard, None)
        await self._on_lost(shard)
        if lease is None:
            return
        try:
            await self._leases.write(lease, None, self._duration_s, acquire=False)
        except LeaseConflict:
            pass

    async def release_all(self) -> None:
        """On shutdown: leave the membership first (so the others' fair share grows at
        once), then hand every shard back."""
        try:
            await self._leases.delete(member_lease_name(self.identity))
        except Exception:
            log.exception("could not delete member lease")
        shards = list(self.held)
        for shard in shards:
            self.held.pop(shard, None)
            await self._on_lost(shard)
        # A renewal or take cancelled mid-flight may still land (its call runs in a thread):
        # release what the API server says we hold, at its current version, until nothing.
        for attempt in range(RELEASE_PASSES):
            try:
                mine = [
                    x for x in await self._leases.list(SHARD_LABEL) if x.holder == self.identity
                ]
            except Exception:
                log.exception("could not list shard leases to release them")
                return
            if not mine:
                return
            if attempt:
                await asyncio.sleep(0.2)  # let the calls still in flight land first
            await asyncio.gather(
                *(self._leases.write(x, None, self._duration_s, acquire=False) for x in mine),
                return_exceptions=True,
            )

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            self.wake.clear()
            try:
                await self.tick()
            except Exception:
                log.exception("lease tick failed")
            delay = max(0.0, self._renew - (time.monotonic() - started))
            waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self.wake.wait())]
            await asyncio.wait(waiters, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waiters:
                waiter.cancel()

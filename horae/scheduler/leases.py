"""Shard ownership through Kubernetes Leases, written only when a shard changes hands.

Each replica renews one member Lease (`horae-member-<identity>`) every renew period: that
is the only Lease it writes while nothing changes. It holds at most ceil(shards / live
members) shard Leases (`horae-shard-NN`), which name their holder and are written only to
take or release a shard; a shard Lease is live while its holder's member Lease is. Expiry
is judged the way client-go's leader election does: by how long a member Lease's
resourceVersion has stayed unchanged on this replica's own monotonic clock, so clock skew
between machines does not matter; a member whose process PostgreSQL saw die (`Sessions`,
`horae.scheduler.members`) is judged by a renew period instead of the lease duration.
Shard Leases without a holder, or whose holder has no
live member Lease, are free at once: SIGTERM stops dispatching, deletes the member Lease
and hands the shards back, and the others take them within a few hundred milliseconds.

Before, every shard Lease was renewed every second (64 writes a second to the API server
and etcd for as long as Horae ran); now a steady installation writes one Lease a second
per scheduler replica. What makes dispatch safe is unchanged: a replica dispatches a shard
only while its own last member renewal is younger than the lease duration by its own
clock (a renew period, while it does not hold its session lock), and every dispatch is
fenced by the shard's epoch in PostgreSQL.
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
from typing import Protocol

from horae.errors import LeaseConflict
from horae.kube import Lease, Leases

log = logging.getLogger(__name__)

EXPIRY_MARGIN = 0.02
"""Seconds after a member Lease's expected expiry at which the loop looks at it again."""

RELEASE_PASSES = 3
"""How many times a stopping replica looks for shard Leases it still holds."""

SESSION_MARGIN = 0.25
"""Seconds beyond a renew period after which a member whose session ended, and whose
Lease stands still, is judged gone (its renewals come a renew period apart, give or take
a slow call)."""


class Sessions(Protocol):
    """What PostgreSQL says of the replicas' processes (`horae.scheduler.members`)."""

    def holding(self) -> bool:
        """Whether this replica holds its own session lock."""
        ...

    def ended(self, identity: str) -> bool:
        """Whether that replica's session was seen to end (its process died)."""
        ...


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


def shard_number(lease_name: str) -> int:
    """The shard a shard Lease's name stands for."""
    return int(lease_name.rsplit("-", 1)[1])


def member_lease_name(identity: str) -> str:
    return f"horae-member-{identity}"[:253]


@dataclass
class _Seen:
    resource_version: str
    since: float
    holder: str | None


class ShardLeases:
    """Acquires, confirms, rebalances and releases this replica's shard Leases."""

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
        forget_members_after: float | None = None,
        sessions: Sessions | None = None,
    ) -> None:
        self._leases = leases
        self.identity = identity
        self.shards = shards
        self._duration = lease_duration
        self._duration_s = max(1, math.ceil(lease_duration))
        self._renew = renew_period
        self._on_gained = on_gained
        self._on_lost = on_lost
        self._forget_after = (
            lease_duration if forget_members_after is None else forget_members_after
        )
        """Seconds a member Lease must stand still, as this replica watched it, before it
        deletes it (that version only): by default the lease duration, i.e. as soon as it
        judges the member gone. A replica killed without its SIGTERM (a crash, a node lost)
        leaves its member Lease behind, under a name the Deployment's next pod does not
        reuse; left in place, every replica started later counted it live for its first
        lease duration (it dates a version from its first sight), so its fair share came
        out too small and shards the others shed stayed unowned meanwhile. A replica only
        paused that long creates its member Lease anew when it wakes."""
        self._sessions = sessions
        self._quick = renew_period + SESSION_MARGIN
        """Seconds after its last renewal at which a member whose session ended is judged
        gone (the lease duration when its session is not known to have ended)."""
        self._on_tick = on_tick
        """Called after each completed tick (the scheduler's readiness: it took part in a
        round of shard Leases, and holds `held`)."""
        self._seen: dict[str, _Seen] = {}
        """Each member Lease's resourceVersion and when this replica first saw it."""
        self.held: dict[int, Lease] = {}
        self._member_renewed: float | None = None
        """When (monotonic, taken before the write was sent) our member Lease was last
        renewed: the others judge it expired a lease duration after they saw that write."""
        self.live_members = 1
        self.next_expiry: float | None = None
        """When (monotonic) the first live member Lease other than ours expires unless it
        is renewed meanwhile: the loop looks again then rather than a renew period later,
        so a crashed replica's shards move a lease duration after its last renewal."""
        self.wake = asyncio.Event()
        """Set to run the next tick at once (a Lease was released or a member left)."""

    def valid(self, shard: int) -> bool:
        """Held, and our member Lease renewed within the lease duration by our own clock
        (safe to dispatch: no other replica takes a shard of ours before then); within
        the shorter limit while we do not hold our session lock (the others may then
        judge us by it)."""
        renewed = self._member_renewed
        holding = self._sessions is None or self._sessions.holding()
        limit = self._duration if holding else self._quick
        return shard in self.held and renewed is not None and time.monotonic() - renewed < limit

    def members(self) -> set[str]:
        """The other replicas whose member Leases this replica has seen."""
        holders = {seen.holder for seen in self._seen.values()}
        return {h for h in holders if h is not None and h != self.identity}

    def _ended(self, holder: str | None) -> bool:
        """Whether that member's session was seen to end (its process died)."""
        return holder is not None and self._sessions is not None and self._sessions.ended(holder)

    def _limit(self, holder: str | None) -> float:
        """How long a member Lease must stand still before its holder is judged gone."""
        return self._quick if self._ended(holder) else self._duration

    def observe(self, lease: Lease, at: float) -> None:
        """Date a version of a member Lease seen by a watch at monotonic time `at` (the
        lists of `tick` date the versions they see first the same way)."""
        seen = self._seen.get(lease.name)
        if lease.holder == self.identity or (
            seen is not None and seen.resource_version == lease.resource_version
        ):
            return
        self._seen[lease.name] = _Seen(lease.resource_version, at, lease.holder)

    def _expired(self, lease: Lease, now: float) -> bool:
        seen = self._seen.get(lease.name)
        if seen is None or seen.resource_version != lease.resource_version:
            self._seen[lease.name] = _Seen(lease.resource_version, now, lease.holder)
            return False
        return now - seen.since > self._limit(lease.holder)

    async def tick(self) -> None:
        """One renew period's work: renew our member Lease, count the live members, keep
        what is still ours, shed to the fair share, take free shards up to it."""
        now = time.monotonic()
        # Shards before members: a shard taken by a replica that joined between the two
        # reads then has its member Lease in the second, so it is not judged free.
        current = {lease.name: lease for lease in await self._leases.list(SHARD_LABEL)}
        members = await self._leases.list(MEMBER_LABEL)
        if await self._renew_member(members):
            self._member_renewed = now
        live = {m.holder for m in members if m.holder and not self._expired(m, now)}
        live.add(self.identity)
        mine = member_lease_name(self.identity)
        await asyncio.gather(
            *(self._forget(m) for m in members if m.name != mine and self._silent(m, now))
        )
        for name in set(self._seen) - {m.name for m in members}:
            del self._seen[name]  # a member Lease deleted: forget it
        self.live_members = len(live)
        fair = math.ceil(self.shards / self.live_members)
        self.next_expiry = min(
            (
                expiry
                for name, seen in self._seen.items()
                if name != mine and (expiry := seen.since + self._limit(seen.holder)) >= now
            ),
            default=None,
        )

        # What we hold stays ours while its Lease names us (no write: our member Lease
        # vouches for it); one another replica took (it judged us gone) is lost.
        for shard in sorted(self.held):
            if shard not in self.held:
                continue  # released while an earlier loss was being handled
            lease = current.get(shard_lease_name(shard))
            if lease is None or lease.holder != self.identity:
                await self._lose(shard)
            else:
                self.held[shard] = lease

        # A Lease that names us for a shard we do not hold (a release whose write failed,
        # our previous run under this identity) is taken again below within the fair
        # share, else handed back: it would otherwise stay ours for as long as we live.
        stray = {
            shard_number(name): lease
            for name, lease in current.items()
            if lease.holder == self.identity and shard_number(name) not in self.held
        }

        # Shed extras so newcomers get their share.
        extras = sorted(self.held)[fair:]
        await asyncio.gather(*(self.release(s) for s in extras))

        # Take free shards up to the fair share (concurrently, in rounds).
        free = [
            s
            for s in range(self.shards)
            if s not in self.held and self._takeable(current.get(shard_lease_name(s)), live)
        ]
        random.shuffle(free)
        while free and len(self.held) < fair:
            round_, free = free[: fair - len(self.held)], free[fair - len(self.held) :]
            await asyncio.gather(
                *(self._try_take(s, current.get(shard_lease_name(s))) for s in round_)
            )

        await asyncio.gather(
            *(self._hand_back(lease) for s, lease in stray.items() if s not in self.held)
        )
        self._on_tick()

    async def _renew_member(self, members: list[Lease]) -> bool:
        """Create or renew our member Lease; whether it was written."""
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
            return False  # raced with ourselves after a restart; next tick renews
        return True

    def _silent(self, lease: Lease, now: float) -> bool:
        """Unchanged for `forget_members_after` as this replica watched it, or for the
        shorter limit once its holder's session ended."""
        seen = self._seen.get(lease.name)
        if seen is None or seen.resource_version != lease.resource_version:
            return False
        after = self._forget_after
        if self._ended(lease.holder):
            after = min(after, self._quick)
        return now - seen.since > after

    async def _forget(self, lease: Lease) -> None:
        """Delete the member Lease of a replica gone (that version of it only). Best
        effort: a failure is logged and tried again next tick, never fails the tick."""
        try:
            await self._leases.delete(lease.name, resource_version=lease.resource_version)
        except LeaseConflict:
            return  # renewed meanwhile: not gone
        except Exception:
            log.warning("could not delete the member Lease %s", lease.name, exc_info=True)
            return
        log.info(
            "deleted the member Lease %s of %s, silent for %.1f s",
            lease.name,
            lease.holder,
            self._forget_after,
        )

    def _takeable(self, lease: Lease | None, live: set[str]) -> bool:
        """Free: no Lease yet, no holder, a holder with no live member Lease, or us (a
        Lease left naming us, by a release that failed or by our previous run)."""
        return (
            lease is None
            or lease.holder is None
            or lease.holder == self.identity
            or lease.holder not in live
        )

    async def _try_take(self, shard: int, lease: Lease | None) -> None:
        try:
            if lease is None:
                taken = await self._leases.create(
                    shard_lease_name(shard),
                    self.identity,
                    self._duration_s,
                    {SHARD_LABEL: "true"},
                )
            else:
                taken = await self._leases.write(
                    lease, self.identity, self._duration_s, acquire=True
                )
        except LeaseConflict:
            return
        self.held[shard] = taken
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

    async def _hand_back(self, lease: Lease) -> None:
        """Clear the Lease's holder, if nobody wrote it since we read it."""
        with contextlib.suppress(LeaseConflict):
            await self._leases.write(lease, None, self._duration_s, acquire=False)

    async def release(self, shard: int) -> None:
        """Give a shard up: stop dispatching it, then clear the Lease's holder."""
        lease = self.held.pop(shard, None)
        await self._on_lost(shard)
        if lease is not None:
            await self._hand_back(lease)

    async def release_all(self) -> None:
        """On shutdown: stop dispatching every shard, leave the membership (the others
        may take our shards from then on, and their fair share grows), then hand every
        shard Lease back."""
        for shard in list(self.held):
            self.held.pop(shard, None)
            await self._on_lost(shard)
        try:
            await self._leases.delete(member_lease_name(self.identity))
        except Exception:
            log.exception("could not delete member lease")
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
            delay = self._renew - (time.monotonic() - started)
            if self.next_expiry is not None:
                delay = min(delay, self.next_expiry + EXPIRY_MARGIN - time.monotonic())
            delay = max(0.0, delay)
            waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self.wake.wait())]
            await asyncio.wait(waiters, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waiters:
                waiter.cancel()

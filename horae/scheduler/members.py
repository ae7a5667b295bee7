"""Which scheduler replicas' processes are alive, as PostgreSQL sees their sessions.

A member Lease standing still says a replica stopped renewing, but only a lease duration
(3 s) later can the others tell a crash from a slow renewal. Each replica also holds its
identity's session lock (`horae.store.members`) on a connection of its own; a process that
dies has its socket closed by its kernel and Postgres lets the lock go at once. Every
replica looks at the others' locks every `POLL_PERIOD`: one seen held and then gone marks
its member `ended`, and `ShardLeases` then judges that member's Lease expired a renew
period (plus `SESSION_MARGIN`) after its last renewal instead of a lease duration, so a
killed replica's shards move about 1.2 s after the kill rather than 2.5-3 s.

Only a lock seen held and then gone counts: a replica of an earlier release, one still
starting, or one looked at from a connection just (re)opened is judged by its Lease alone.
A live replica whose lock connection drops goes on renewing its Lease, and the others
judge it by its renewals, which continue; while its own lock is not held, it dispatches only
within the shorter limit itself (`ShardLeases.valid`). Every dispatch stays fenced by the
shard's epoch in PostgreSQL either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from horae.errors import StoreError
from horae.store.members import MemberLocks

log = logging.getLogger(__name__)

POLL_PERIOD = 0.2
"""Seconds between two looks at the other replicas' session locks."""
RETRY_PERIOD = 1.0
"""Seconds before the lock connection is opened again after it failed."""


class MemberSessions:
    """Holds this replica's session lock and notices the others' ending."""

    def __init__(
        self,
        locks: MemberLocks,
        identity: str,
        *,
        members: Callable[[], Iterable[str]] = tuple,
        on_ended: Callable[[], None] = lambda: None,
        poll_period: float = POLL_PERIOD,
    ) -> None:
        self._locks = locks
        self.identity = identity
        self.members = members
        """The identities of the other replicas' member Leases (`ShardLeases.members`)."""
        self.on_ended = on_ended
        """Called when a look finds a member's session ended (wakes the Lease loop)."""
        self._poll = poll_period
        self._holding = False
        self._seen_held: set[str] = set()
        self._ended: set[str] = set()

    def holding(self) -> bool:
        """Whether this replica holds its own session lock (as of its last look)."""
        return self._holding

    def ended(self, identity: str) -> bool:
        """Whether `identity`'s lock was seen held and then gone (and not held since)."""
        return identity in self._ended

    def seen_held(self, identity: str) -> bool:
        """Whether `identity`'s lock was held at the last look (so its end would be seen)."""
        return identity in self._seen_held

    async def look(self) -> None:
        """Take our lock if we do not hold it yet; then note whose locks went away."""
        if self._locks.closed():
            self._drop()
            await self._locks.open()
        if not self._holding:
            self._holding = await self._locks.take(self.identity)
        others = set(self.members())
        held = await self._locks.held(others) if others else set()
        gone = (self._seen_held & others) - held
        for identity in sorted(gone):
            log.info("the session of scheduler %s ended: judged by its last renewal", identity)
        self._ended = (self._ended | gone) & (others - held)
        self._seen_held = held
        if gone:
            self.on_ended()

    def _drop(self) -> None:
        """Forget what the lost connection saw: no lock is judged gone from a new one
        before it was seen held there."""
        self._holding = False
        self._seen_held.clear()

    async def run(self, stop: asyncio.Event) -> None:
        """Look every poll period until `stop` (the lock stays held until `close`)."""
        while not stop.is_set():
            delay = self._poll
            try:
                await self.look()
            except StoreError:
                log.warning("the member lock connection failed; opening it again", exc_info=True)
                await self.close()
                delay = RETRY_PERIOD
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)

    async def close(self) -> None:
        """Let our lock go with its connection (on shutdown, once the Leases are handed
        back)."""
        self._drop()
        with contextlib.suppress(StoreError):
            await self._locks.close()

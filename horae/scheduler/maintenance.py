"""Partition maintenance, done by one replica at a time (its own Lease `horae-maintenance`):
create the daily execution partitions ahead and drop those past retention."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from datetime import UTC, datetime, timedelta

import asyncpg

from horae.kube import LeaseConflict, Leases
from horae.store.migrate import maintain_partitions

log = logging.getLogger(__name__)

LEASE_NAME = "horae-maintenance"


class Maintenance:
    def __init__(
        self,
        pool: asyncpg.Pool[asyncpg.Record],
        leases: Leases,
        *,
        identity: str,
        lease_duration: timedelta,
        ahead_days: int,
        retention_days: int,
        every: timedelta = timedelta(hours=1),
    ) -> None:
        self._pool = pool
        self._leases = leases
        self._identity = identity
        self._duration = lease_duration.total_seconds()
        self._ahead = ahead_days
        self._retention = retention_days
        self._every = every.total_seconds()
        self._seen: tuple[str, float] | None = None
        self._last_run = -math.inf
        self.holder = False

    async def _hold(self) -> bool:
        found = [
            x for x in await self._leases.list("horae.dev/maintenance") if x.name == LEASE_NAME
        ]
        duration = max(1, math.ceil(self._duration))
        now = time.monotonic()
        try:
            if not found:
                await self._leases.create(
                    LEASE_NAME, self._identity, duration, {"horae.dev/maintenance": "true"}
                )
                return True
            lease = found[0]
            if self._seen is None or self._seen[0] != lease.resource_version:
                self._seen = (lease.resource_version, now)
            expired = now - self._seen[1] > self._duration
            if lease.holder in (None, self._identity) or expired:
                await self._leases.write(lease, self._identity, duration,
                                         acquire=lease.holder != self._identity)  # fmt: skip
                return True
        except LeaseConflict:
            pass
        return False

    async def tick(self) -> None:
        self.holder = await self._hold()
        if self.holder and time.monotonic() - self._last_run >= self._every:
            async with self._pool.acquire() as conn:
                created, dropped = await maintain_partitions(
                    conn, today=datetime.now(UTC).date(), ahead_days=self._ahead,
                    retention_days=self._retention,
                )  # fmt: skip
            self._last_run = time.monotonic()
            log.info("partitions: created %s, dropped %d", [str(d) for d in created], dropped)

    async def run(self, stop: asyncio.Event, period: float) -> None:
        while not stop.is_set():
            try:
                await self.tick()
            except Exception:
                log.exception("maintenance tick failed")
            try:
                await asyncio.wait_for(stop.wait(), timeout=period)
            except TimeoutError:
                pass

    async def release(self) -> None:
        if not self.holder:
            return
        for lease in await self._leases.list("horae.dev/maintenance"):
            if lease.name == LEASE_NAME and lease.holder == self._identity:
                try:
                    await self._leases.write(lease, None, 1, acquire=False)
                except LeaseConflict:
                    pass

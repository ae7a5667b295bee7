"""Partition maintenance, done by one replica at a time (its own Lease `horae-maintenance`):
create the daily execution partitions ahead and drop those past the installation's retention
(kept in the database, so every replica and `horae migrate` agree on it), in every store
group. The holder of this Lease also rebalances tenants' allowances (`allowances`)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from datetime import timedelta

from horae.clock import utc_now
from horae.kube import Leases, SingletonLease
from horae.store.db import Database
from horae.store.groups import Store
from horae.store.installation import read_installation
from horae.store.migrate import maintain_partitions

log = logging.getLogger(__name__)

LEASE_NAME = "horae-maintenance"


class Maintenance:
    def __init__(
        self,
        store: Store,
        leases: Leases,
        *,
        identity: str,
        lease_duration: timedelta,
        ahead_days: int,
        every: timedelta = timedelta(hours=1),
    ) -> None:
        self._store = store
        self._duration = lease_duration.total_seconds()
        self._ahead = ahead_days
        self._every = every.total_seconds()
        self._last_run = -math.inf
        self._lease = SingletonLease(
            leases,
            LEASE_NAME,
            identity=identity,
            duration=self._duration,
            label="horae.dev/maintenance",
        )
        self.holder = False
        self._held_at = -math.inf

    async def _hold(self) -> bool:
        """Take or renew the Lease; whether this replica holds it."""
        self.holder = await self._lease.hold()
        self._held_at = time.monotonic()
        return self.holder

    async def tick(self) -> None:
        if await self._hold() and time.monotonic() - self._last_run >= self._every:
            failed = 0
            for group, database in self._store.each():
                try:
                    await self._maintain(group, database)
                except Exception:  # one group down must not hold up the others
                    log.exception("partition maintenance of store group %s failed", group)
                    failed += 1
            if not failed:
                self._last_run = time.monotonic()

    async def _maintain(self, group: str, database: Database) -> None:
        async with database.acquire() as conn:
            # The installation's retention, read each time: `horae migrate` may have
            # changed it since this replica started.
            retention = (await read_installation(conn)).retention_days
            done = await maintain_partitions(
                conn,
                today=utc_now().date(),
                ahead_days=self._ahead,
                retention_days=retention,
                go_on=self._still_held,
            )
        log.info(
            "partitions of store group %s: created %s, dropped %d; ended jobs deleted: %d",
            group,
            [str(d) for d in done.created],
            done.dropped,
            done.pruned,
        )

    async def _still_held(self) -> bool:
        """Between two batches of a long pass (deleting the ended jobs of an hour at a high
        rate, or of everything past retention on the first pass after an upgrade): whether
        this replica still holds the Lease, renewed once a third of its duration went by,
        so that no other replica takes it (and its rebalancing) while this one works."""
        if time.monotonic() - self._held_at < self._duration / 3:
            return True
        if not await self._hold():
            log.warning("maintenance Lease lost during a pass: the rest waits for the next")
        return self.holder

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
        if self.holder:
            await self._lease.release()

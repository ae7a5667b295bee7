"""The backfill feeder: each running backfill of a shard this replica holds gets its next
slice of occurrences, due now and tagged with it, at most `rate` a second.

The rate is a token bucket kept in the store: `fed_at` is the instant up to which
occurrences are owed; a round may feed `rate * (now - fed_at)` of them, at most one
second's worth, and moves `fed_at` on by what it fed (never further back than a second: an
idle backfill saves no burst). So from its creation on, a backfill has never created more
than `rate * elapsed` executions, and only about one second's worth are ever queued ahead:
a year of `* * * * *` does not flood the queue. `Forbid` overlap feeds one occurrence at a
time, once none of its executions is live. Feeding waits while the job is paused; a job
cancelled cancels its backfills. A backfill fed to its end whose executions all ended is
completed. Each slice is inserted, and the cursor advanced, in one transaction fenced by
the shard's epoch (`dispatch.fenced`), as dispatch is.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from datetime import datetime, timedelta

from horae.clock import utc_now
from horae.domain.backfills import Overlap
from horae.models import JobState
from horae.store import backfills as store
from horae.store.db import Database
from horae.store.dispatch import fenced
from horae.store.occurrences import fire_times_between

log = logging.getLogger(__name__)

BURST = timedelta(seconds=1)
"""The most a backfill may be owed: a slice is at most one second's worth of its rate."""


def owed(rate: int, fed_at: datetime, now: datetime) -> tuple[int, datetime]:
    """(how many occurrences a backfill at `rate` may be fed now, its `fed_at` after them)."""
    since = max(fed_at, now - BURST)
    n = max(0, math.floor(rate * (now - since).total_seconds()))
    return n, since + timedelta(seconds=n / rate)


class Feeder:
    def __init__(
        self,
        pool: Database,
        *,
        epochs: Callable[[], dict[int, int]],
        period: timedelta = timedelta(milliseconds=250),
    ) -> None:
        self._pool = pool
        self._epochs = epochs
        self._period = period.total_seconds()

    async def round(self) -> int:
        """Feed every running backfill of the held shards once; how many executions were made."""
        epochs = dict(self._epochs())
        if not epochs:
            return 0
        made = 0
        async with self._pool.acquire() as conn:
            for f in await store.running_backfills(conn, sorted(epochs)):
                b = f.backfill
                now = utc_now()
                if f.job_state in (JobState.CANCELLED, JobState.COMPLETED):
                    await store.cancel_backfill(conn, b.id, now=now, why=f"job {f.job_state}")
                    continue
                if b.fed:
                    if f.live == 0 and await store.complete_backfill(conn, b.id, now):
                        log.info("backfill %s completed", b.id, extra={"job_id": str(b.job_id)})
                    continue
                if f.job_state != JobState.ACTIVE:
                    continue  # paused: fed again once resumed
                n, fed_at = owed(b.rate, b.fed_at, now)
                if b.overlap == Overlap.FORBID:
                    n = min(n, 0 if f.live else 1)
                if n == 0:
                    continue
                after = b.cursor_at or b.from_at - timedelta(microseconds=1)
                times = fire_times_between(
                    b.cron, b.time_zone, after=after, before=b.to_at, limit=n
                )
                if not times:
                    continue
                async with fenced(conn, {b.shard: epochs[b.shard]}) as held:
                    if b.shard in held:
                        made += await store.feed(conn, f, times, fed_at=fed_at, now=now) or 0
        return made

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.round()
            except Exception:
                log.exception("backfill feeding round failed")
            try:
                await asyncio.wait_for(stop.wait(), timeout=self._period)
            except TimeoutError:
                pass

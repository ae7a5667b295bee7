"""Preload owned shards' windows into a timer heap and publish each execution at its due moment.

Order of writes per batch: publish with confirms, then the fenced UPDATE to
`queued`. A crash between the two leaves the rows `scheduled`, so they are
published again (a duplicate message the worker's claim drops), never lost.
A fenced-out UPDATE means another replica took the shard: it is dropped at once.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from horae.broker import Publisher
from horae.models import ExecutionMessage
from horae.store import executions as store
from horae.store.executions import Due

log = logging.getLogger(__name__)

PRELOAD_LIMIT = 50_000
BATCH_LIMIT = 2_000


def _now() -> datetime:
    return datetime.now(UTC)


class Dispatcher:
    """Holds the preload window of every owned shard and dispatches it on time."""

    def __init__(
        self,
        pool: asyncpg.Pool[asyncpg.Record],
        publisher: Publisher,
        *,
        identity: str,
        window: timedelta,
        refresh_period: timedelta,
        lease_valid: Callable[[int], bool],
        on_fenced: Callable[[int], Any],
    ) -> None:
        self._pool = pool
        self._publisher = publisher
        self._identity = identity
        self._window = window
        self._refresh_period = refresh_period.total_seconds()
        self._lease_valid = lease_valid
        self._on_fenced = on_fenced
        self.epochs: dict[int, int] = {}
        self._heap: list[tuple[datetime, uuid.UUID, Due]] = []
        self._known: set[uuid.UUID] = set()
        self._wake = asyncio.Event()
        self._refresh_now = asyncio.Event()
        self.dispatched = 0

    # -- ownership -----------------------------------------------------------
    async def gain(self, shard: int) -> None:
        async with self._pool.acquire() as conn:
            self.epochs[shard] = await store.take_shard(conn, shard, self._identity, _now())
        self._refresh_now.set()

    async def lose(self, shard: int) -> None:
        self.epochs.pop(shard, None)

    def notified(self, *_: object) -> None:
        """A near-term execution was inserted for one of our shards: re-read now."""
        self._refresh_now.set()

    # -- preload -------------------------------------------------------------
    async def refresh(self) -> int:
        shards = sorted(self.epochs)
        if not shards:
            return 0
        until = _now() + self._window
        async with self._pool.acquire() as conn:
            rows = await store.preload(conn, shards, until, PRELOAD_LIMIT)
        added = 0
        for due in rows:
            if due.id not in self._known:
                self._known.add(due.id)
                heapq.heappush(self._heap, (due.due_at, due.id, due))
                added += 1
        if added:
            self._wake.set()
        return added

    async def run_refresh(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self._refresh_now.clear()
            try:
                await self.refresh()
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                log.exception("preload failed; retrying")
            try:
                await asyncio.wait_for(self._refresh_now.wait(), timeout=self._refresh_period)
            except TimeoutError:
                pass

    # -- dispatch ------------------------------------------------------------
    async def run_dispatch(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self._wake.clear()
            now = _now()
            batch: list[Due] = []
            while self._heap and self._heap[0][0] <= now and len(batch) < BATCH_LIMIT:
                batch.append(heapq.heappop(self._heap)[2])
            if batch:
                await self._dispatch(batch)
                continue
            delay = (self._heap[0][0] - now).total_seconds() if self._heap else 1.0
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=min(max(delay, 0.0), 1.0))
            except TimeoutError:
                pass

    async def _dispatch(self, batch: list[Due]) -> None:
        by_shard: dict[int, list[Due]] = defaultdict(list)
        for due in batch:
            if due.shard in self.epochs and self._lease_valid(due.shard):
                by_shard[due.shard].append(due)
            else:
                self._known.discard(due.id)  # not ours (any more): forget it
        if not by_shard:
            return
        messages = [
            ExecutionMessage(
                execution_id=d.id,
                job_id=d.job_id,
                task=d.task,
                tenant=d.tenant,
                due_at=d.due_at,
                occurrence_at=d.occurrence_at,
                attempt=d.attempt,
            )
            for dues in by_shard.values()
            for d in dues
        ]
        started = time.monotonic()
        try:
            await self._publisher.publish_batch(messages)
        except Exception:
            log.exception("publish failed; the batch stays scheduled and is re-read")
            for dues in by_shard.values():
                for d in dues:
                    self._known.discard(d.id)
            await asyncio.sleep(0.5)
            return
        now = _now()
        async with self._pool.acquire() as conn:
            for shard, dues in by_shard.items():
                epoch = self.epochs.get(shard)
                moved = None
                if epoch is not None:
                    moved = await store.mark_queued(conn, shard, epoch, dues, now)
                for d in dues:
                    self._known.discard(d.id)
                if moved is None:
                    log.warning(
                        "fenced out of shard %d; dropping it", shard, extra={"shard": shard}
                    )
                    self.epochs.pop(shard, None)
                    await self._on_fenced(shard)
                    continue
                self.dispatched += moved
        log.debug("dispatched %d in %.3fs", len(messages), time.monotonic() - started)

"""The reaper: recover executions that a crash or a lost message left behind, per owned shard.

- published but not claimed within the redelivery timeout, counted from the later of its
  publication and its due time (a message published early by the dispatch lead waits at
  a worker until it is due): published again. What this replica published is remembered
  by its dispatcher (`Dispatcher.unclaimed`: the rows stay `scheduled`); rows an earlier
  release marked `queued` are found by their mark.
- claimed ahead of its due time (no start recorded) and its lease expired, its outcome never
  recorded (its worker died before it was due, or before recording it): `scheduled` again,
  as it was due, not an attempt.
- `running` with an expired lease (the worker stopped heartbeating): a failed
  attempt ("lease lost") with a retry per the job's policy, or `dead` (and a
  copy on the dead-letter queue, and the dead-execution webhook when one is set) when it
  was the last attempt; `cancelled` (`cancel_requested`), never retried, when it had been
  asked to stop (its job cancelled, or a Replace occurrence replaced it).
Every write is fenced with the shard's epoch, like dispatch.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from horae import alerts, metrics
from horae.broker import Publisher
from horae.clock import DatabaseClock
from horae.models import ExecutionStatus, RetryPolicy
from horae.scheduler.rounds import message
from horae.store import dispatch as store
from horae.store.db import Database
from horae.store.dispatch import Due
from horae.store.rows import ExpiredRun

if TYPE_CHECKING:
    from horae.scheduler.dispatcher import Dispatcher

log = logging.getLogger(__name__)

BATCH = 1_000
CHECK_AFTER = timedelta(seconds=5)
"""A published execution is looked up (claimed yet?) once this long past its publish and
its due time; most have been claimed by then, and are forgotten."""


RETURN_EVERY = 0.5
"""Seconds between looks for executions claimed ahead by silent workers (a read of the
workers' promises when none is silent)."""
RETURN_WINDOW = timedelta(seconds=90)
"""Only workers silent for less than this are looked at: what a worker claims ahead falls
due within its hold limit (60 s) of its last promise; older claims are the leases'."""


class Reaper:
    def __init__(
        self,
        pool: Database,
        publisher: Publisher,
        dispatcher: Dispatcher,
        *,
        redelivery_timeout: timedelta,
        check_after: timedelta = CHECK_AFTER,
        period: timedelta = timedelta(seconds=5),
        dead_webhook: str | None = None,
    ) -> None:
        self._pool = pool
        self._dispatcher = dispatcher
        """The group's dispatcher: the shards it holds (their epochs) and what it published."""
        self._check_after = check_after
        self._publisher = publisher
        self._redelivery = redelivery_timeout
        self._period = period.total_seconds()
        self._webhook = alerts.DeadWebhook(dead_webhook)
        self._clock = DatabaseClock()
        """Leases are judged by Postgres's clock, the one the workers write them by."""

    async def sweep(self) -> tuple[int, int]:
        """One pass; returns (republished, leases lost)."""
        epochs = dict(self._dispatcher.epochs)
        if not epochs:
            return 0, 0
        shards = sorted(epochs)
        async with self._pool.acquire() as conn:
            await self._clock.sync(conn)
            now = self._clock.now()
            unclaimed = await self._dispatcher.unclaimed(
                conn, now, self._redelivery, check_after=self._check_after
            )
            if unclaimed:
                await self._publisher.publish_batch([message(d) for d in unclaimed])
                self._dispatcher.republished(unclaimed)
            stale = await store.stale_queued(conn, shards, now - self._redelivery, BATCH)
            if stale:
                await self._publisher.publish_batch([message(d) for d in stale])
                by_shard: dict[int, list[Due]] = defaultdict(list)
                for d in stale:
                    by_shard[d.shard].append(d)
                for shard, dues in by_shard.items():
                    await store.touch_queued(conn, shard, epochs[shard], dues, now)
            again = len(unclaimed) + len(stale)
            if again:
                metrics.reaped.labels("redelivered").inc(again)
                log.info("republished %d unclaimed executions", again)
            returned = await store.return_unstarted(conn, epochs, now)
            if returned:
                metrics.reaped.labels("returned").inc(returned)
                log.info("%d executions claimed ahead were never recorded: scheduled again",
                         returned)  # fmt: skip
            lost = 0
            for row in await store.expired_running(conn, shards, now, BATCH):
                policy = RetryPolicy.model_validate(row.retry_policy)
                last = row.attempt >= policy.max_attempts
                retry_at = None if last else now + policy.delay(row.attempt)
                ended = await store.lose_lease(
                    conn, row, epoch=epochs[row.shard], now=now, retry_at=retry_at
                )
                if ended is not None:
                    lost += 1
                    if ended == ExecutionStatus.DEAD:
                        due = Due(
                            row.id,
                            row.job_id,
                            row.tenant,
                            row.task,
                            row.shard,
                            row.due_at,
                            row.occurrence_at,
                            row.attempt,
                        )
                        body = message(due).model_dump_json().encode()
                        await self._publisher.dead_letter(
                            body, str(row.id), {"reason": "lease lost"}
                        )
                        metrics.dead_letters.inc()
                        self._webhook.send(_lease_lost_event(row))
            if lost:
                metrics.reaped.labels("lease_lost").inc(lost)
                log.info("%d running executions lost their lease", lost)
        return again, lost

    async def return_unpromised(self) -> int:
        """Executions claimed ahead whose workers' promises did not reach their due times
        within the workers' grace (killed, or frozen) go back to `scheduled`; how many."""
        epochs = dict(self._dispatcher.epochs)
        if not epochs:
            return 0
        async with self._pool.acquire() as conn:
            returned = await store.return_unpromised(conn, epochs, RETURN_WINDOW)
        if returned:
            metrics.reaped.labels("unpromised").inc(returned)
            log.info("%d executions claimed ahead by silent workers: scheduled again", returned)
        return returned

    async def run(self, stop: asyncio.Event) -> None:
        """A sweep every period; what silent workers claimed ahead, every `RETURN_EVERY`."""
        loop = asyncio.get_running_loop()
        next_sweep = loop.time()
        while not stop.is_set():
            if loop.time() >= next_sweep:
                next_sweep = loop.time() + self._period
                try:
                    await self.sweep()
                except Exception:  # the loop must outlive any one failure
                    log.exception("reaper pass failed")
            try:
                await self.return_unpromised()
            except Exception:
                log.exception("returning what silent workers claimed ahead failed")
            try:
                await asyncio.wait_for(stop.wait(), timeout=RETURN_EVERY)
            except TimeoutError:
                pass


def _lease_lost_event(row: ExpiredRun) -> dict[str, Any]:
    """The dead-execution webhook's event for a last attempt that died with its lease."""
    return alerts.dead_event(
        execution_id=row.id,
        job_id=row.job_id,
        job_name=row.job_name,
        tenant=row.tenant,
        task=row.task,
        attempt=row.attempt,
        occurrence_at=row.occurrence_at,
        error_kind="lease_lost",
        error_message=f"worker {row.lease_owner or '?'} stopped heartbeating",
    )

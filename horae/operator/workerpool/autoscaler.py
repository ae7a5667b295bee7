"""The `Autoscaler`: every period, each tracked pool's Deployment scaled on its queue depth."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from horae import metrics
from horae.broker import Names, QueueDepths
from horae.clock import utc_now
from horae.domain.instants import rfc3339
from horae.kube import CustomObjects, Deployments, ServiceAccounts
from horae.operator.measuring import failed
from horae.operator.workerpool.deployment import PoolRefused, check_owned, ensure_deployment
from horae.operator.workerpool.scaling import ScaleDown, decide, desired_replicas
from horae.operator.workerpool.spec import Pool

log = logging.getLogger(__name__)


@dataclass
class _Tracked:
    pool: Pool
    waiting: ScaleDown | None = None
    last_scale_time: str | None = None
    shown: dict[str, Any] = field(default_factory=dict)
    refused: str | None = None
    """The reason of the refusal last logged, until the pool is scaled again."""


class Autoscaler:
    """Scales every known WorkerPool's Deployment on its queue depth, every `period`."""

    def __init__(
        self,
        *,
        deployments: Deployments,
        accounts: ServiceAccounts,
        objects: CustomObjects,
        broker_url: str,
        names: Names,
        period: timedelta = timedelta(seconds=5),
        stabilization: timedelta = timedelta(seconds=300),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._deployments = deployments
        self._accounts = accounts
        self._objects = objects
        self._depths = QueueDepths(broker_url)
        self._names = names
        self._period = period.total_seconds()
        self._window = stabilization.total_seconds()
        self._clock = clock
        self._pools: dict[tuple[str, str], _Tracked] = {}
        self._wake = asyncio.Event()
        self._busy = asyncio.Lock()
        self._stopping = False

    def track(self, pool: Pool) -> None:
        """Scale `pool` from now on (or with its new spec); it is looked at right away."""
        key = (pool.namespace, pool.name)
        tracked = self._pools.get(key)
        if tracked is None or tracked.pool.uid != pool.uid:
            self._pools[key] = _Tracked(pool)
        else:
            tracked.pool = pool
        self._wake.set()

    def forget(self, namespace: str, name: str) -> None:
        self._pools.pop((namespace, name), None)

    async def run(self) -> None:
        """Scale every `period` (and whenever a pool is tracked) until `stop()`."""
        try:
            while True:
                self._wake.clear()
                async with self._busy:
                    if self._stopping:
                        return
                    await self.tick()
                try:
                    async with asyncio.timeout(self._period):  # no task, unlike wait_for
                        await self._wake.wait()
                except TimeoutError:
                    pass
        finally:
            await self._depths.close()

    async def stop(self) -> None:
        """End `run()` after the round in progress and close the broker connection.

        Called from kopf's cleanup: kopf waits for (then cancels) every task that appeared
        after it started, and the connection's reader is one."""
        async with self._busy:
            self._stopping = True
            self._wake.set()
            await self._depths.close()

    async def tick(self) -> None:
        """Look at every pool once, and at what waits for a pool in `<prefix>.held`."""
        try:
            metrics.held_messages.set(await self._depths.ready(self._names.held))
        except asyncio.CancelledError:
            raise
        except Exception:
            failed("autoscaler")
            log.exception("could not read the depth of %s", self._names.held)
        for key, tracked in list(self._pools.items()):
            if self._pools.get(key) is not tracked:
                continue  # forgotten (or replaced) while an earlier pool was looked at
            try:
                await self._scale(tracked)
                tracked.refused = None
            except asyncio.CancelledError:
                raise
            except PoolRefused as refused:
                # No fault of the operator's, and it lasts until someone removes that
                # Deployment or marks the account again: said once, not every period.
                if refused.reason != tracked.refused:
                    log.warning("WorkerPool %s/%s not scaled: %s", *key, refused)
                    tracked.refused = refused.reason
            except Exception:
                failed("autoscaler")
                log.exception("could not autoscale WorkerPool %s/%s", *key)

    async def _scale(self, tracked: _Tracked) -> None:
        pool, spec = tracked.pool, tracked.pool.spec
        ready = await self._depths.ready(self._names.pool_queue(pool.namespace, pool.name))
        deployment = await self._deployments.get(pool.namespace, pool.name)
        if deployment is None:
            # Deleted behind our back (put it back), or with its WorkerPool (then forget it).
            gone = {"replicas": 0, "readyReplicas": 0}
            if await self._objects.patch_status("workerpools", pool.namespace, pool.name, gone):
                await ensure_deployment(self._deployments, self._accounts, pool)
            else:
                self.forget(pool.namespace, pool.name)
            return
        check_owned(deployment, pool)
        desired = desired_replicas(
            ready,
            minimum=spec.min_replicas,
            maximum=spec.max_replicas,
            target=spec.target_backlog_per_replica,
        )
        decision = decide(
            current=deployment.replicas,
            desired=desired,
            maximum=spec.max_replicas,
            waiting=tracked.waiting,
            now=self._clock(),
            window=self._window,
        )
        tracked.waiting = decision.waiting
        if decision.replicas != deployment.replicas:
            # A deleted WorkerPool's Deployment may outlive it a while (garbage collection),
            # and its delete event may reach `forget` after this round began: a scale is rare,
            # so the pool is read first and a gone one is never scaled again.
            found = await self._objects.get("workerpools", pool.namespace, pool.name)
            if found is None or found["metadata"]["uid"] != pool.uid:
                if self._pools.get((pool.namespace, pool.name)) is tracked:
                    self.forget(pool.namespace, pool.name)  # (a namesake is tracked anew)
                return
            if not await self._deployments.scale(pool.namespace, pool.name, decision.replicas):
                return
            tracked.last_scale_time = rfc3339(utc_now())
            up = decision.replicas > deployment.replicas
            metrics.scale_decisions.labels("up" if up else "down").inc()
            log.info(
                "scaled WorkerPool %s/%s from %d to %d replicas (%d ready messages)",
                pool.namespace,
                pool.name,
                deployment.replicas,
                decision.replicas,
                ready,
            )
        status = {
            "queueDepth": ready,
            "desiredReplicas": desired,
            "replicas": decision.replicas,
            "readyReplicas": deployment.ready_replicas,
            "lastScaleTime": tracked.last_scale_time,
        }
        if status != tracked.shown:
            present = await self._objects.patch_status(
                "workerpools", pool.namespace, pool.name, status
            )
            if not present:
                self.forget(pool.namespace, pool.name)
                return
            tracked.shown = status

"""The `Autoscaler`: every period, each tracked pool's spec.replicas decided (autoscaling
Builtin: on its queue depth) and its Deployment scaled to it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, timedelta
from typing import TYPE_CHECKING, Any

from horae import metrics
from horae.broker import Names, QueueDepths
from horae.clock import utc_now
from horae.domain.instants import rfc3339
from horae.errors import ObjectChanged
from horae.kube import CustomObjects, Deployments, ServiceAccounts
from horae.operator.conditions import Condition
from horae.operator.measuring import failed
from horae.operator.reporting import StatusWriter
from horae.operator.workerpool.ahead import DueSoon
from horae.operator.workerpool.deployment import PoolRefused, check_owned, ensure_deployment
from horae.operator.workerpool.scaling import Decision, ScaleDown, Wanted, decide, wanted
from horae.operator.workerpool.spec import Pool
from horae.store import routing

if TYPE_CHECKING:
    from horae.store.groups import Store

log = logging.getLogger(__name__)


def scaling_condition(
    pool: Pool, *, wanted: Wanted, decision: Decision, window: float, lead: float, ready_pods: int
) -> Condition:
    """The pool's `Scaling` condition once the autoscaler has decided `decision` (its
    figure for spec.replicas) from `wanted`: True while a scale-down waits out the
    stabilization window of `window` seconds, and while replicas are held for executions
    about to fall due (`lead` seconds ahead) beyond what the queue asks for."""
    spec = pool.spec
    if not pool.builtin:
        return Condition(
            "Scaling", False, "External", f"{decision.replicas} replicas, as spec.replicas says"
        )
    if decision.waiting is not None:
        return Condition(
            "Scaling",
            True,
            "ScaleDownStabilizing",
            f"the queue asks for {wanted.replicas} replicas; {decision.replicas} kept until it"
            f" has asked for fewer for {window:g}s",
        )
    spike = wanted.spike
    if spike is not None and wanted.ahead > wanted.queue and wanted.ahead > spec.min_replicas:
        held = (
            f"; held at maxReplicas {spec.max_replicas}" if wanted.ahead > spec.max_replicas else ""
        )
        return Condition(
            "Scaling",
            True,
            "ScaleAhead",
            f"{spike.count} executions due at {spike.first.astimezone(UTC):%H:%M:%S} UTC ask for"
            f" {wanted.ahead} replicas{held}: {decision.replicas} asked {lead:g}s ahead,"
            f" {ready_pods} ready",
        )
    if wanted.queue > spec.max_replicas:
        return Condition(
            "Scaling",
            False,
            "MaxReplicas",
            f"the queue asks for {wanted.queue} replicas; held at maxReplicas {spec.max_replicas}",
        )
    return Condition(
        "Scaling", False, "DesiredReplicas", f"{decision.replicas} replicas, as the queue asks"
    )


def _why(ready: int, want: Wanted) -> str:
    """What a scale was decided from, for the log."""
    spike = want.spike
    if spike is None or want.ahead <= want.queue:
        return f"{ready} ready messages"
    return (
        f"{ready} ready messages; {spike.count} executions due at"
        f" {spike.first.astimezone(UTC):%H:%M:%S} UTC"
    )


@dataclass
class _Tracked:
    pool: Pool
    waiting: ScaleDown | None = None
    last_scale_time: str | None = None
    shown: dict[str, Any] = field(default_factory=dict)
    refused: str | None = None
    """The reason of the refusal last logged, until the pool is scaled again."""


class Autoscaler:
    """Every `period`, decides each known WorkerPool's spec.replicas from its queue depth
    and the executions due within `lead` (autoscaling Builtin) and scales its Deployment to
    spec.replicas (either way). `lead` is a worker pod's start-up time: a pool is scaled for
    a spike that long (and one period) before it falls due; zero (or no `store`) scales on
    the queue alone."""

    def __init__(
        self,
        *,
        deployments: Deployments,
        accounts: ServiceAccounts,
        objects: CustomObjects,
        broker_url: str,
        statuses: StatusWriter | None = None,
        names: Names,
        period: timedelta = timedelta(seconds=5),
        stabilization: timedelta = timedelta(seconds=300),
        store: Store | None = None,
        lead: timedelta = timedelta(0),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._deployments = deployments
        self._accounts = accounts
        self._objects = objects
        self._statuses = statuses or StatusWriter(objects, "workerpools")
        self._depths = QueueDepths(broker_url)
        self._names = names
        self._period = period.total_seconds()
        self._period_delta = period
        self._window = stabilization.total_seconds()
        self._store = store
        self._lead = lead
        self._due = DueSoon()
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
        await self._read_due()
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

    async def _read_due(self) -> None:
        """Read the next slice of due time from the store (when any pool scales on it); a
        failed read is tried again, from the same point, next round."""
        if (
            self._store is None
            or not self._lead
            or not any(t.pool.builtin for t in self._pools.values())
        ):
            return
        now = utc_now()
        self._due.forget_passed(now)
        due_slice = self._due.next_slice(now, self._lead + self._period_delta)
        if due_slice is None:
            return
        since, until = due_slice
        try:
            rows = await routing.due_ahead(self._store, since=since, until=until)
        except asyncio.CancelledError:
            raise
        except Exception:
            failed("autoscaler")
            log.exception("could not read the executions due from %s", rfc3339(since))
            return
        self._due.add(until, rows)

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
        current = deployment.replicas if spec.replicas is None else spec.replicas
        if pool.builtin:
            want = wanted(
                ready=ready,
                due=self._due.spikes(pool.tenants or (pool.namespace,)) if self._lead else (),
                now=utc_now(),
                lead=self._lead,
                period=self._period_delta,
                minimum=spec.min_replicas,
                maximum=spec.max_replicas,
                target=spec.target_backlog_per_replica,
            )
            decision = decide(
                current=current,
                desired=want.replicas,
                maximum=spec.max_replicas,
                waiting=tracked.waiting,
                now=self._clock(),
                window=self._window,
            )
        else:
            want = Wanted(current, current, 0, None)
            decision = Decision(current, None)
        desired = want.replicas
        tracked.waiting = decision.waiting
        moved = decision.replicas != deployment.replicas
        if (moved or (pool.builtin and decision.replicas != spec.replicas)) and not (
            await self._follow(tracked, decision.replicas, deployment.replicas, _why(ready, want))
        ):
            return
        condition = scaling_condition(
            pool,
            wanted=want,
            decision=decision,
            window=self._window,
            lead=self._lead.total_seconds(),
            ready_pods=deployment.ready_replicas,
        )
        status = {
            "queueDepth": ready,
            "desiredReplicas": desired,
            "replicas": decision.replicas,
            "readyReplicas": deployment.ready_replicas,
            "lastScaleTime": tracked.last_scale_time,
        }
        shown = status | {"condition": condition}
        if shown != tracked.shown:
            try:
                present = await self._statuses.write(
                    pool.namespace, pool.name, pool.uid, status, [condition]
                )
            except ObjectChanged as exc:
                log.info("%s: written in a later round", exc)  # tracked.shown stays as it was
                return
            if not present:
                self.forget(pool.namespace, pool.name)
                return
            tracked.shown = shown

    async def _follow(self, tracked: _Tracked, replicas: int, running: int, why: str) -> bool:
        """Make the pool's spec.replicas (autoscaling Builtin) and its Deployment's
        `replicas` (it runs `running`); False when the pool is gone, or when its
        spec.replicas changed since it was tracked (someone scaled it: the next round
        decides from that figure)."""
        pool = tracked.pool
        # A deleted WorkerPool's Deployment may outlive it a while (garbage collection),
        # and its delete event may reach `forget` after this round began: a scale is rare,
        # so the pool is read first and a gone one is never scaled again.
        found = await self._objects.get("workerpools", pool.namespace, pool.name)
        if found is None or found["metadata"]["uid"] != pool.uid:
            if self._pools.get((pool.namespace, pool.name)) is tracked:
                self.forget(pool.namespace, pool.name)  # (a namesake is tracked anew)
            return False
        scaled = found.get("spec", {}).get("replicas")
        if scaled is not None and scaled != pool.spec.replicas:
            tracked.pool = pool.with_replicas(scaled)
            self._wake.set()
            return False
        if pool.builtin and scaled != replicas:
            patched = await self._objects.patch(
                "workerpools", pool.namespace, pool.name, {"spec": {"replicas": replicas}}
            )
            if patched is None:
                return False
            tracked.pool = pool.with_replicas(replicas)
        if replicas != running:
            if not await self._deployments.scale(pool.namespace, pool.name, replicas):
                return False
            tracked.last_scale_time = rfc3339(utc_now())
            if pool.builtin:  # the autoscaler's own decision (External: someone else's)
                metrics.scale_decisions.labels("up" if replicas > running else "down").inc()
            log.info(
                "scaled WorkerPool %s/%s from %d to %d replicas (%s)",
                pool.namespace,
                pool.name,
                running,
                replicas,
                why,
            )
        return True

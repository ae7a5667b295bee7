"""`horae operator`: kopf handlers plus the store -> status mirror, in one event loop."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import kopf

from horae import metrics
from horae.broker import Names
from horae.config import Settings
from horae.kube import (
    CustomObjects,
    Deployments,
    Events,
    Leases,
    SingletonLease,
    load_api_client,
)
from horae.operator import scheduledjob, workerpool
from horae.operator.executions import ExecutionMirrors
from horae.operator.resync import Resync
from horae.operator.status import StatusMirror
from horae.store.db import connect_pool
from horae.store.installation import read_installation

log = logging.getLogger(__name__)


def build_registry() -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.persistence.finalizer = "horae.dev/finalizer"
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="horae.dev")
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix="horae.dev", key="last-handled-configuration"
        )
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    scheduledjob.register(registry)
    workerpool.register(registry)
    return registry


LEADER_LEASE = "horae-operator"


async def _lead(lease: SingletonLease, renew: float, duration: float) -> None:
    """Renew the leader Lease until it is lost; returns (so the process exits) once another
    replica holds it, or once it could not be renewed for a whole lease duration."""
    renewed = time.monotonic()
    while True:
        await asyncio.sleep(renew)
        try:
            if not await lease.hold():
                log.error("leader Lease %s taken by another replica", lease.name)
                return
            renewed = time.monotonic()
        except Exception:
            log.exception("could not renew the leader Lease")
            if time.monotonic() - renewed > duration:
                return


async def run(settings: Settings) -> None:
    cfg = settings.operator
    metrics.serve(settings.metrics_port)  # up in standby too: it is the liveness probe
    api = load_api_client(settings.kube.kubeconfig)
    leases = Leases(api, settings.kube.namespace)
    lease = SingletonLease(leases, LEADER_LEASE, identity=cfg.identity,
                           duration=cfg.lease_duration.total_seconds(),
                           label="horae.dev/operator-leader")  # fmt: skip
    renew = cfg.lease_duration.total_seconds() / 3
    # Standby until this replica leads: two replicas never both act.
    while True:
        if await lease.hold():
            break
        await asyncio.sleep(renew)
    log.info("operator %s leads (Lease %s)", cfg.identity, LEADER_LEASE)
    pool = await connect_pool(settings.database.url, size=settings.database.pool_size)
    async with pool.acquire() as conn:
        shards = (await read_installation(conn)).shards
    objects = CustomObjects(api)
    mirrors = ExecutionMirrors(pool, objects)
    events = Events(api)
    mirror = StatusMirror(settings.database.url, pool, objects, events, mirrors)
    resync = Resync(pool, objects, mirrors, shards=shards,
                    period=cfg.resync_period.total_seconds())  # fmt: skip
    deployments = Deployments(api)
    autoscaler = workerpool.Autoscaler(
        deployments=deployments,
        objects=objects,
        broker_url=settings.broker.url,
        names=Names(settings.broker.prefix),
        period=cfg.autoscale_period,
        stabilization=cfg.scale_down_stabilization,
    )
    memo = kopf.Memo(
        namespace=settings.kube.namespace,  # Horae's own: where shared WorkerPools may be
        pool=pool,
        shards=shards,
        mirrors=mirrors,
        events=events,
        deployments=deployments,
        autoscaler=autoscaler,
    )
    background = [
        asyncio.create_task(mirror.run(), name="status-mirror"),
        asyncio.create_task(resync.run(), name="resync"),
        asyncio.create_task(autoscaler.run(), name="autoscaler"),
    ]
    operator = asyncio.create_task(
        kopf.operator(registry=build_registry(), clusterwide=True, standalone=True, memo=memo)
    )
    leading = asyncio.create_task(_lead(lease, renew, cfg.lease_duration.total_seconds()))
    try:
        await asyncio.wait([operator, leading], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in [leading, operator, *background]:
            task.cancel()
        await asyncio.gather(leading, operator, *background, return_exceptions=True)
        await pool.close()
    if leading.done() and not leading.cancelled():
        raise SystemExit("lost the leader Lease; exiting so that only the new leader acts")
    await lease.release()  # a clean stop: hand leadership over at once
    api.close()

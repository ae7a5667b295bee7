"""`horae operator`: kopf handlers plus the store -> status mirror, in one event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from typing import Any

import kopf
from kubernetes import client

from horae import metrics
from horae.broker import Names
from horae.config import Settings
from horae.kube import (
    CustomObjects,
    Deployments,
    Events,
    Lease,
    Leases,
    ServiceAccounts,
    SingletonLease,
    load_api_client,
    watch_leases,
)
from horae.operator import backfill, measuring, scheduledjob, workerpool
from horae.operator.executions import ExecutionMirrors
from horae.operator.reporting import StatusWriter
from horae.operator.resync import Resync
from horae.operator.status import StatusMirror
from horae.probes import Probes
from horae.store.groups import Store

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
        # A resource deleted while its timer (a Backfill's status) is mid-call keeps its
        # finalizer until kopf sees the timer has exited; kopf looks again only this often
        # (60 s by default), and a delete hung for a minute when no later event woke it.
        settings.background.cancellation_polling = 1.0

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    scheduledjob.register(registry)
    workerpool.register(registry)
    backfill.register(registry)
    return registry


LEADER_LEASE = "horae-operator"


async def _standby(
    lease: SingletonLease, api: client.ApiClient, namespace: str, *, poll: float, probes: Probes
) -> None:
    """Return once this replica holds the leader Lease.

    A watch on the Lease wakes the standby the moment the leader releases it (a clean
    stop) and dates every renewal as it happens, so after a crash the standby tries again
    at the instant the last renewal it saw is a lease duration old, not at its next poll.
    The poll, every `poll` seconds, stands in while the watch is broken.
    """
    loop = asyncio.get_running_loop()
    released = asyncio.Event()

    def seen(event: str, found: Lease, at: float) -> None:  # on the event loop
        lease.observe(found, at)
        if event == "DELETED" or found.holder is None:
            released.set()

    def on_change(event: str, found: Lease) -> None:  # in the watch thread
        if found.name == lease.name:
            loop.call_soon_threadsafe(seen, event, found, time.monotonic())

    stop = threading.Event()
    threading.Thread(
        target=watch_leases,
        args=(api, namespace, lease.selector, on_change, stop),
        daemon=True,
        name="watch-leader",
    ).start()
    try:
        while True:
            released.clear()
            try:
                if await lease.hold():
                    return
                probes.ready("standing by")
                wait = min(poll, max(0.05, lease.expires_in()))
            except Exception:
                log.exception("could not read or take the leader Lease")
                wait = poll
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(released.wait(), wait)
    finally:
        stop.set()


RENEW_DEADLINE = 2 / 3
"""Of the lease duration: a leader that has not renewed its Lease for this long stops
(client-go's leader election uses 10 s of 15 s). A standby takes the Lease no sooner than
a whole duration after the last renewal it saw, so the old leader has stopped by then."""


async def _lead(lease: SingletonLease, renew: float, duration: float) -> None:
    """Renew the leader Lease until it is lost; returns (so the process stops acting and
    exits) once another replica holds it, or once no renewal succeeded within the renew
    deadline, a hanging call included."""
    deadline = duration * RENEW_DEADLINE
    renewed = time.monotonic()
    while (left := renewed + deadline - time.monotonic()) > 0:
        await asyncio.sleep(min(renew, left))
        left = renewed + deadline - time.monotonic()
        try:
            if not await asyncio.wait_for(lease.hold(), timeout=max(0.05, left)):
                log.error("leader Lease %s taken by another replica", lease.name)
                return
            renewed = time.monotonic()
        except TimeoutError:
            break
        except Exception:
            log.exception("could not renew the leader Lease")
    log.error("leader Lease %s not renewed within %.1fs: stopping", lease.name, deadline)


def _leader_lease(settings: Settings, api: client.ApiClient) -> SingletonLease:
    cfg = settings.operator
    return SingletonLease(
        Leases(api, settings.kube.namespace),
        LEADER_LEASE,
        identity=cfg.identity,
        duration=cfg.lease_duration.total_seconds(),
        label="horae.dev/operator-leader",
    )


async def _start_leading(
    settings: Settings, api: client.ApiClient
) -> tuple[kopf.Memo, list[asyncio.Task[None]]]:
    """The leader's collaborators, as kopf's memo (`memo.store` the store's groups), and its
    background tasks, started: the catalog's follower, the status mirror, the resync pass
    and the WorkerPool autoscaler."""
    cfg = settings.operator
    store = await Store.open(settings.database.url, size=settings.database.pool_size)
    metrics.shards.set(store.catalog.shards)
    measuring.start()
    objects = CustomObjects(api)
    mirrors = ExecutionMirrors(store, objects, enabled=cfg.execution_mirror)
    events = Events(api)
    mirror = StatusMirror(
        settings.database.url,
        store,
        objects,
        events,
        mirrors,
        status_every=cfg.status_interval.total_seconds(),
    )
    mirror.listen()
    resync = Resync(
        store, objects, mirrors, period=cfg.resync_period.total_seconds(), writer=mirror.writer
    )
    deployments = Deployments(api)
    accounts = ServiceAccounts(api)
    pool_status = StatusWriter(objects, "workerpools")
    autoscaler = workerpool.Autoscaler(
        deployments=deployments,
        accounts=accounts,
        objects=objects,
        statuses=pool_status,
        broker_url=settings.broker.url,
        names=Names(settings.broker.prefix),
        period=cfg.autoscale_period,
        stabilization=cfg.scale_down_stabilization,
        store=store,
        lead=cfg.scale_ahead,
    )
    memo = kopf.Memo(
        namespace=settings.kube.namespace,  # Horae's own: where shared WorkerPools may be
        store=store,
        mirrors=mirrors,
        events=events,
        objects=objects,
        job_status=mirror.writer,  # every writer of a status's conditions goes through one
        pool_status=pool_status,
        backfill_status=StatusWriter(objects, "backfills"),
        deployments=deployments,
        service_accounts=accounts,
        autoscaler=autoscaler,
    )
    background = [
        asyncio.create_task(store.follow(asyncio.Event()), name="follow-catalog"),
        asyncio.create_task(mirror.run(), name="status-mirror"),
        asyncio.create_task(resync.run(), name="resync"),
        asyncio.create_task(autoscaler.run(), name="autoscaler"),
    ]
    return memo, background


def _exit_deposed() -> None:
    """As client-go's leader election: a leader that lost its Lease exits at once, before
    a standby can take over, not after its tasks (and calls hanging on an unreachable API
    server) have wound down."""
    log.critical("lost the leader Lease; exiting so that only the new leader acts")
    logging.shutdown()
    os._exit(1)


async def run(settings: Settings) -> None:
    cfg = settings.operator
    probes = Probes(stall_after=settings.liveness_stall.total_seconds())
    probes.serve(settings.metrics_port)  # in standby too
    beat = asyncio.create_task(probes.beat())
    api = load_api_client(settings.kube.kubeconfig)
    lease = _leader_lease(settings, api)
    renew = cfg.lease_duration.total_seconds() / 3
    # Standby until this replica leads: two replicas never both act.
    await _standby(lease, api, settings.kube.namespace, poll=renew, probes=probes)
    probes.ready("leading")
    log.info("operator %s leads (Lease %s)", cfg.identity, LEADER_LEASE)
    memo, background = await _start_leading(settings, api)
    operator = asyncio.create_task(
        kopf.operator(registry=build_registry(), clusterwide=True, standalone=True, memo=memo)
    )
    leading = asyncio.create_task(_lead(lease, renew, cfg.lease_duration.total_seconds()))
    try:
        await asyncio.wait([operator, leading], return_when=asyncio.FIRST_COMPLETED)
        if leading.done():
            _exit_deposed()
    finally:
        for task in [leading, operator, *background]:
            task.cancel()
        await asyncio.gather(leading, operator, *background, return_exceptions=True)
        probes.unready("stopping")
        # A clean stop: hand leadership over at once (nothing of ours writes any more),
        # then close the store groups' pools, however long that takes.
        await lease.release()
        await memo.store.close()
    beat.cancel()
    api.close()

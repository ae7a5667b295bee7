"""`horae scheduler`: lease loop, preload refresh and dispatch, until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

from kubernetes import client

from horae import broker, metrics
from horae.config import Settings
from horae.errors import ShardBusy
from horae.kube import Lease, Leases, load_api_client, watch_leases
from horae.probes import Probes
from horae.scheduler.dispatcher import Dispatcher
from horae.scheduler.leases import (
    MEMBER_LABEL,
    SHARD_LABEL,
    NotYet,
    ShardLeases,
    frees_shards,
)
from horae.scheduler.listener import ShardListener
from horae.scheduler.maintenance import Maintenance
from horae.scheduler.reaper import Reaper
from horae.store.db import Database
from horae.store.installation import read_installation

log = logging.getLogger(__name__)


KUBE_THREADS = 32
"""Threads for Kubernetes calls: Lease renewals and takes go out concurrently."""
WATCHED = (SHARD_LABEL, MEMBER_LABEL)
"""The label selectors of the Lease watches, each a thread of its own."""


async def take_shard(dispatcher: Dispatcher, listener: ShardListener, shard: int) -> None:
    """Start dispatching a shard just won: LISTEN on its channel first, then read its window.
    A row committed after the read announces itself to a channel already listened on; in the
    other order, one committed between the read and the LISTEN (due soon, so behind the
    cursor) waited for the next full re-read, up to 30 s: the 28 s start lag seen after a
    scheduler was killed under load."""
    await listener.add(shard)
    try:
        await dispatcher.gain(shard)
    except ShardBusy:
        raise NotYet("a dispatch of its previous owner still holds its epoch") from None


@dataclass(frozen=True)
class _Parts:
    """The scheduler's long-running parts, wired to each other."""

    dispatcher: Dispatcher
    listener: ShardListener
    shard_leases: ShardLeases
    reaper: Reaper
    maintenance: Maintenance

    def start(self, stop: asyncio.Event, probes: Probes) -> list[asyncio.Task[None]]:
        """Run every part as a task until `stop` is set (the probes' beat until cancelled)."""
        return [
            asyncio.create_task(probes.beat(), name="beat"),
            asyncio.create_task(self.listener.run(stop), name="listener"),
            asyncio.create_task(self.shard_leases.run(stop), name="leases"),
            asyncio.create_task(self.dispatcher.run_refresh(stop), name="refresh"),
            asyncio.create_task(self.dispatcher.run_dispatch(stop), name="dispatch"),
            asyncio.create_task(self.reaper.run(stop), name="reaper"),
            asyncio.create_task(self.maintenance.run(stop, period=10.0), name="maintenance"),
        ]


def _shard_parts(
    settings: Settings,
    pool: Database,
    publisher: broker.Publisher,
    api: client.ApiClient,
    *,
    shards: int,
    probes: Probes,
) -> tuple[Dispatcher, ShardListener, ShardLeases]:
    """The dispatcher, the listener and the shard Leases, wired: a shard Lease gained or
    lost starts or stops the shard's dispatch and LISTEN; a dispatch fenced out releases
    the shard's Lease."""
    cfg = settings.scheduler
    shard_leases: ShardLeases

    async def lost(shard: int) -> None:
        metrics.lease_transitions.labels("lost").inc()
        await dispatcher.lose(shard)
        await listener.remove(shard)

    async def gained(shard: int) -> None:
        metrics.lease_transitions.labels("gained").inc()
        await take_shard(dispatcher, listener, shard)

    async def fenced(shard: int) -> None:
        await shard_leases.release(shard)

    def took_part() -> None:
        """Ready once this replica has taken part in a round of shard Leases."""
        probes.ready(f"holds {len(shard_leases.held)} of {shards} shards")

    dispatcher = Dispatcher(
        pool,
        publisher,
        identity=cfg.identity,
        window=cfg.preload_window,
        max_rows=cfg.preload_max_rows,
        refresh_period=cfg.refresh_period,
        lead=cfg.dispatch_lead,
        lease_valid=lambda s: shard_leases.valid(s),
        on_fenced=fenced,
    )
    listener = ShardListener(settings.database.url, dispatcher.notified, dispatcher.reload)
    shard_leases = ShardLeases(
        Leases(api, settings.kube.namespace),
        identity=cfg.identity,
        shards=shards,
        lease_duration=cfg.lease_duration.total_seconds(),
        renew_period=cfg.renew_period.total_seconds(),
        on_gained=gained,
        on_lost=lost,
        on_tick=took_part,
    )
    return dispatcher, listener, shard_leases


def _housekeeping(
    settings: Settings,
    pool: Database,
    publisher: broker.Publisher,
    api: client.ApiClient,
    dispatcher: Dispatcher,
) -> tuple[Reaper, Maintenance]:
    """The reaper (on the shards the dispatcher holds) and partition maintenance."""
    cfg = settings.scheduler
    reaper = Reaper(
        pool,
        publisher,
        epochs=lambda: dispatcher.epochs,
        redelivery_timeout=cfg.redelivery_timeout,
        dead_webhook=cfg.dead_webhook,
    )
    maintenance = Maintenance(
        pool,
        Leases(api, settings.kube.namespace),
        identity=cfg.identity,
        lease_duration=timedelta(seconds=30),
        ahead_days=settings.database.partitions_ahead_days,
    )
    return reaper, maintenance


def _take_over_the_loop(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """Kubernetes calls run in the loop's default executor: size it for Lease renewals
    and takes going out concurrently. SIGTERM and SIGINT set `stop`."""
    loop.set_default_executor(
        ThreadPoolExecutor(max_workers=KUBE_THREADS, thread_name_prefix="kube")
    )
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


def _watch(
    api: client.ApiClient,
    namespace: str,
    shard_leases: ShardLeases,
    loop: asyncio.AbstractEventLoop,
) -> threading.Event:
    """Start the Lease watches (a thread each); the event returned stops them."""
    watch_stop = threading.Event()

    def on_lease_change(event: str, lease: Lease) -> None:
        # Only changes that free a shard or a member's share wake the event loop; the
        # renewals (many a second) are filtered here, in the watch thread.
        if frees_shards(event, lease):
            loop.call_soon_threadsafe(shard_leases.wake.set)

    for selector in WATCHED:
        threading.Thread(
            target=watch_leases,
            args=(api, namespace, selector, on_lease_change, watch_stop),
            daemon=True,
            name=f"watch-{selector}",
        ).start()
    return watch_stop


async def run(settings: Settings) -> None:
    cfg = settings.scheduler
    pool = await Database.open(settings.database.url, size=settings.database.pool_size)
    async with pool.acquire() as conn:
        shards = (await read_installation(conn)).shards
    connection = await broker.connect(settings.broker.url)
    publisher = broker.Publisher(connection, broker.Names(settings.broker.prefix))
    await publisher.start()
    # One HTTP connection for each thread that may call Kubernetes at once, and for each
    # Lease watch: a smaller pool discards connections (a warning each) at every round of
    # renewals, and opens them again.
    api = load_api_client(settings.kube.kubeconfig, connections=KUBE_THREADS + len(WATCHED))

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    _take_over_the_loop(loop, stop)
    probes = Probes()
    dispatcher, listener, shard_leases = _shard_parts(
        settings, pool, publisher, api, shards=shards, probes=probes
    )
    reaper, maintenance = _housekeeping(settings, pool, publisher, api, dispatcher)
    parts = _Parts(dispatcher, listener, shard_leases, reaper, maintenance)
    probes.serve(settings.metrics_port)
    watch_stop = _watch(api, settings.kube.namespace, parts.shard_leases, loop)
    log.info("scheduler %s starting with %d shards", cfg.identity, shards)

    tasks = parts.start(stop, probes)
    await stop.wait()
    probes.unready("stopping")
    held = len(parts.shard_leases.held)
    log.info("scheduler %s stopping: releasing %d shards", cfg.identity, held)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    watch_stop.set()
    await parts.shard_leases.release_all()
    await parts.maintenance.release()
    await connection.close()
    await pool.close()
    api.close()

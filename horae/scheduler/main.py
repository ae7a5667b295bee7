"""`horae scheduler`: lease loop, preload refresh and dispatch, until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

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
    # Kubernetes calls run in threads; Lease renewals and takes go out concurrently.
    loop.set_default_executor(
        ThreadPoolExecutor(max_workers=KUBE_THREADS, thread_name_prefix="kube")
    )
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

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

    probes = Probes()

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
    probes.serve(settings.metrics_port)
    watch_stop = threading.Event()

    def on_lease_change(event: str, lease: Lease) -> None:
        # Only changes that free a shard or a member's share wake the event loop; the
        # renewals (many a second) are filtered here, in the watch thread.
        if frees_shards(event, lease):
            loop.call_soon_threadsafe(shard_leases.wake.set)

    for selector in WATCHED:
        threading.Thread(
            target=watch_leases,
            args=(api, settings.kube.namespace, selector, on_lease_change, watch_stop),
            daemon=True,
            name=f"watch-{selector}",
        ).start()
    log.info("scheduler %s starting with %d shards", cfg.identity, shards)

    tasks = [
        asyncio.create_task(probes.beat(), name="beat"),
        asyncio.create_task(listener.run(stop), name="listener"),
        asyncio.create_task(shard_leases.run(stop), name="leases"),
        asyncio.create_task(dispatcher.run_refresh(stop), name="refresh"),
        asyncio.create_task(dispatcher.run_dispatch(stop), name="dispatch"),
        asyncio.create_task(reaper.run(stop), name="reaper"),
        asyncio.create_task(maintenance.run(stop, period=10.0), name="maintenance"),
    ]
    await stop.wait()
    probes.unready("stopping")
    log.info("scheduler %s stopping: releasing %d shards", cfg.identity, len(shard_leases.held))
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    watch_stop.set()
    await shard_leases.release_all()
    await maintenance.release()
    await connection.close()
    await pool.close()
    api.close()

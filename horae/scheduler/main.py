"""`horae scheduler`: lease loop, and per store group preload refresh, dispatch and reaper,
until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

from kubernetes import client

from horae import broker, collector, logs, metrics
from horae.config import Settings
from horae.kube import Lease, Leases, load_api_client, watch_leases
from horae.probes import Probes
from horae.scheduler.allowances import Rebalancer
from horae.scheduler.backfill import Feeder
from horae.scheduler.dispatcher import Dispatcher
from horae.scheduler.groups import Fenced, GroupParts, ShardRouter
from horae.scheduler.leases import MEMBER_LABEL, SHARD_LABEL, ShardLeases, frees_shards
from horae.scheduler.listener import ShardListener
from horae.scheduler.maintenance import Maintenance
from horae.scheduler.members import MemberSessions
from horae.scheduler.reaper import Reaper
from horae.store.groups import Store, group_url
from horae.store.members import MemberLocks
from horae.supervise import Supervisor

log = logging.getLogger(__name__)


KUBE_THREADS = 32
"""Threads for Kubernetes calls: Lease renewals and takes go out concurrently."""
WATCHED = (SHARD_LABEL, MEMBER_LABEL)
"""The label selectors of the Lease watches, each a thread of its own."""


@dataclass(frozen=True)
class Scheduler:
    """The scheduler's long-running parts, wired to each other: the shard Leases, each store
    group's dispatcher, listener and reaper (`ShardRouter`), partition maintenance, the
    allowance rebalancer and the replicas' session locks."""

    store: Store
    router: ShardRouter
    shard_leases: ShardLeases
    sessions: MemberSessions
    maintenance: Maintenance
    allowances: Rebalancer

    def start(
        self, stop: asyncio.Event, probes: Probes, supervisor: Supervisor
    ) -> list[asyncio.Task[None]]:
        """Run every part as a task until `stop` is set (the probes' beat until cancelled);
        a part that ends before then stops the process (`supervisor`)."""
        self.router.watch = supervisor.watch
        tasks = [
            asyncio.create_task(probes.beat(), name="beat"),
            asyncio.create_task(self.store.follow(stop), name="catalog"),
            *self.router.start(stop),
            asyncio.create_task(self.sessions.run(stop), name="sessions"),
            asyncio.create_task(self.shard_leases.run(stop), name="leases"),
            asyncio.create_task(self.maintenance.run(stop, period=10.0), name="maintenance"),
            asyncio.create_task(
                self.allowances.run(stop, lambda: self.maintenance.holder), name="allowances"
            ),
        ]
        supervisor.watch(tasks)
        return tasks

    async def shutdown(self, tasks: list[asyncio.Task[None]]) -> None:
        """Stop every task (those of groups' parts too), then hand the Leases back."""
        for task in [*tasks, *self.router.tasks()]:
            task.cancel()
        await asyncio.gather(*tasks, *self.router.tasks(), return_exceptions=True)
        await self.shard_leases.release_all()
        await self.maintenance.release()
        await self.sessions.close()


def build(
    settings: Settings,
    store: Store,
    publisher: broker.Publisher,
    api: client.ApiClient,
    probes: Probes,
) -> Scheduler:
    """Wire the parts: a shard Lease gained or lost starts or stops the shard's dispatch and
    LISTEN in its group; a dispatch fenced out (not by a move) releases the shard's Lease."""
    cfg = settings.scheduler
    shards = store.catalog.shards
    shard_leases: ShardLeases

    def group_parts(group: str, fenced: Fenced) -> GroupParts:
        database = store.database(group)
        dispatcher = Dispatcher(
            database,
            publisher,
            identity=cfg.identity,
            window=cfg.preload_window,
            max_rows=cfg.preload_max_rows,
            refresh_period=cfg.refresh_period,
            lead=cfg.dispatch_lead,
            burst_lead=cfg.burst_lead,
            burst_size=cfg.burst_size,
            interval=cfg.dispatch_interval,
            lease_valid=lambda s: shard_leases.valid(s),
            on_fenced=fenced,
            group=group,
        )
        url = group_url(group, store.catalog.addresses[group], settings.database.url)
        listener = ShardListener(url, dispatcher.notified, dispatcher.reload)
        reaper = Reaper(
            database,
            publisher,
            dispatcher,
            redelivery_timeout=cfg.redelivery_timeout,
            dead_webhook=cfg.dead_webhook,
        )
        feeder = Feeder(database, epochs=lambda: dispatcher.epochs)
        return GroupParts(group, dispatcher, listener, reaper, feeder)

    router = ShardRouter(store, group_parts, max_rows=cfg.preload_max_rows)

    async def lost(shard: int) -> None:
        metrics.lease_transitions.labels("lost").inc()
        await router.lose(shard)

    async def gained(shard: int) -> None:
        metrics.lease_transitions.labels("gained").inc()
        await router.gain(shard)

    def took_part() -> None:
        """Ready once this replica has taken part in a round of shard Leases."""
        probes.ready(f"holds {len(shard_leases.held)} of {shards} shards")

    sessions = MemberSessions(MemberLocks(settings.database.url), cfg.identity)
    shard_leases = ShardLeases(
        Leases(api, settings.kube.namespace),
        identity=cfg.identity,
        shards=shards,
        lease_duration=cfg.lease_duration.total_seconds(),
        renew_period=cfg.renew_period.total_seconds(),
        on_gained=gained,
        on_lost=lost,
        on_tick=took_part,
        sessions=sessions,
    )
    sessions.members = shard_leases.members
    sessions.on_ended = shard_leases.wake.set
    router.release = shard_leases.release
    maintenance = Maintenance(
        store,
        Leases(api, settings.kube.namespace),
        identity=cfg.identity,
        lease_duration=timedelta(seconds=30),
        ahead_days=settings.database.partitions_ahead_days,
    )
    return Scheduler(store, router, shard_leases, sessions, maintenance, Rebalancer(store))


def _take_over_the_loop(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """Kubernetes calls run in the loop's default executor: size it for Lease renewals
    and takes going out concurrently. SIGTERM and SIGINT set `stop`."""
    loop.set_default_executor(
        ThreadPoolExecutor(max_workers=KUBE_THREADS, thread_name_prefix="kube")
    )
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    logs.dump_tasks_on(loop)


def _watch(
    api: client.ApiClient,
    namespace: str,
    shard_leases: ShardLeases,
    loop: asyncio.AbstractEventLoop,
) -> threading.Event:
    """Start the Lease watches (a thread each); the event returned stops them."""
    watch_stop = threading.Event()

    def on_lease_change(event: str, lease: Lease) -> None:
        # Changes that free a shard or a member's share wake the event loop; a member's
        # renewal (one a second per replica) is dated as it is seen, so a replica that
        # stops renewing is judged gone a lease duration after its last renewal, not
        # after this replica's next look at it.
        if frees_shards(event, lease):
            loop.call_soon_threadsafe(shard_leases.wake.set)
        elif MEMBER_LABEL in lease.labels:  # (a deletion frees shards: handled above)
            loop.call_soon_threadsafe(shard_leases.observe, lease, time.monotonic())

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
    store = await Store.open(settings.database.url, size=settings.database.pool_size)
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
    probes = Probes(stall_after=settings.liveness_stall.total_seconds())
    metrics.shards.set(store.catalog.shards)
    metrics.zero(metrics.lease_transitions, "gained", "lost")
    metrics.zero(metrics.reaped, "redelivered", "lease_lost")
    metrics.zero(metrics.skipped, "deadline", "forbid", "buffer_one")
    scheduler = build(settings, store, publisher, api, probes)
    probes.serve(settings.metrics_port)
    watch_stop = _watch(api, settings.kube.namespace, scheduler.shard_leases, loop)
    log.info(
        "scheduler %s starting with %d shards (%s)",
        cfg.identity,
        store.catalog.shards,
        store.describe(),
    )

    collector.settle()
    supervisor = Supervisor(stop)
    tasks = scheduler.start(stop, probes, supervisor)
    await stop.wait()
    probes.unready("stopping")
    held = len(scheduler.shard_leases.held)
    log.info("scheduler %s stopping: releasing %d shards", cfg.identity, held)
    watch_stop.set()
    await scheduler.shutdown(tasks)
    await connection.close()
    await store.close()
    api.close()
    supervisor.check()

"""`horae worker`: consume a pool's queue, claim, run handlers, record outcomes, ack.

A message carries a batch of executions of one task. Per execution: wait until it
is due by Postgres's clock (the scheduler publishes up to its dispatch lead early) -> claim (one
UPDATE; no row = duplicate or stale: drop) -> run the handler under its timeout
-> record the outcome (and any retry execution); the message is acked once every
execution in it got that far (a long handler's, once it is claimed). A crash
before that leaves the message unacked, so RabbitMQ redelivers it (claims already
made fail and are dropped); a crash after a claim leaves a lease the reaper
reclaims.

Two layers do it: `messages` (the queue: parsing, dead-lettering, claims, acks, hand-back)
and `execution` (holding until due, running handlers, outcomes, heartbeats). `Worker`
puts them together over one pool, publisher and clock, for the tasks it is given; `run`
is the process: it imports the tasks module, connects, and serves until SIGTERM.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import logging
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from horae import broker, collector, logs, metrics
from horae.clock import DatabaseClock
from horae.config import Settings
from horae.probes import Probes
from horae.store.db import WORKER_IDLE_IN_TRANSACTION_TIMEOUT_MS
from horae.store.groups import Store
from horae.supervise import Supervisor
from horae.worker import control
from horae.worker.execution import Executions
from horae.worker.messages import FOREIGN, Messages
from horae.worker.sdk import TaskDefinition, registered_tasks

log = logging.getLogger(__name__)


def load_tasks(spec: str) -> dict[str, TaskDefinition]:
    """Import the module (dotted name or .py path) whose `@task` handlers this worker runs;
    the tasks registered once it is imported, by name."""
    if spec.endswith(".py"):
        path = Path(spec).resolve()
        mod_spec = importlib.util.spec_from_file_location(path.stem, path)
        if mod_spec is None or mod_spec.loader is None:
            raise ImportError(f"cannot load tasks from {spec}")
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[path.stem] = module
        mod_spec.loader.exec_module(module)
    else:
        importlib.import_module(spec)
    return registered_tasks()


class Worker:
    """A worker serving `tasks` (by name): its message layer and its execution layer."""

    def __init__(
        self,
        *,
        settings: Settings,
        store: Store,
        publisher: broker.Publisher,
        tasks: Mapping[str, TaskDefinition],
    ) -> None:
        self.store = store
        self.clock = DatabaseClock()
        """Every instant this worker writes (lease ends, retry times, hand-back due times)
        is read from Postgres's clock, so a skewed host cannot shorten its leases."""
        self.executions = Executions(
            settings=settings.worker,
            store=store,
            publisher=publisher,
            tasks=tasks,
            clock=self.clock,
        )
        self.messages = Messages(
            settings=settings.worker,
            store=store,
            publisher=publisher,
            executions=self.executions,
            clock=self.clock,
        )

    async def serve(
        self,
        queue: broker.Queue,
        stop: asyncio.Event,
        probes: Probes,
        *,
        control_queue: broker.Queue | None = None,
    ) -> None:
        """Consume `queue` until `stop`, then wind down (`Messages.consume`); heartbeats go
        on until then, through the grace period, and so do following the store's catalog
        (which group holds each shard), the worker's promises (`Promises`: first, what an
        earlier process of it claimed ahead is scheduled again) and, given one, the worker's
        control queue."""
        if control_queue is not None:
            await control.follow(control_queue, self.executions)
        wound_down = asyncio.Event()
        await self.executions.promises.start()
        heartbeat = asyncio.create_task(self.executions.heartbeat(wound_down), name="heartbeat")
        follow = asyncio.create_task(self.store.follow(wound_down), name="catalog")
        promise = asyncio.create_task(self.executions.promises.run(wound_down), name="promises")
        supervisor = Supervisor(stop)  # any of them ending on its own stops the worker
        supervisor.watch([heartbeat, follow, promise])
        try:
            await self.messages.consume(queue, stop, probes)
        finally:
            wound_down.set()
            heartbeat.cancel()
            follow.cancel()
            promise.cancel()
        supervisor.check()


async def run(settings: Settings, tasks_module: str) -> None:
    tasks = load_tasks(tasks_module)
    cfg = settings.worker
    store = await Store.open(
        settings.database.url,
        size=settings.database.pool_size,
        idle_in_transaction_ms=WORKER_IDLE_IN_TRANSACTION_TIMEOUT_MS,
    )
    connection = await broker.connect(settings.broker.url, heartbeat=cfg.broker_heartbeat or None)
    names = broker.Names(settings.broker.prefix)
    publisher = broker.Publisher(connection, names)
    await publisher.start()
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=cfg.concurrency)
    queue = await broker.bind_pool(
        channel,
        names,
        namespace=cfg.pool_namespace,
        pool=cfg.pool,
        tenants=cfg.tenants,
        tasks=tasks,
    )
    control_queue = await broker.declare_control_queue(
        await connection.channel(), names, cfg.identity
    )
    worker = Worker(settings=settings, store=store, publisher=publisher, tasks=tasks)
    async with store.home.acquire() as conn:
        await worker.clock.sync(conn)
    probes = Probes(stall_after=settings.liveness_stall.total_seconds())
    metrics.concurrency.set(cfg.concurrency)
    metrics.zero(metrics.refused, "malformed", "oversized", "unprocessable", FOREIGN)
    probes.serve(settings.metrics_port)
    beat = asyncio.create_task(probes.beat())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    logs.dump_tasks_on(loop)
    log.info(
        "worker %s runs tasks %s; store groups %s", cfg.identity, sorted(tasks), store.describe()
    )
    collector.settle()
    await worker.serve(queue, stop, probes, control_queue=control_queue)
    beat.cancel()
    await connection.close()
    await store.close()

"""Celery (RabbitMQ broker) as a peer: ETA tasks, two workers, no result backend.

    .venv-peers/bin/python -m bench.peers.celery_driver --scenario sustained --rate R --seconds S
    .venv-peers/bin/python -m bench.peers.celery_driver --scenario top --count N [--lead S]

Each run gets a fresh RabbitMQ vhost (rabbitmqctl, removed afterwards). Two
`python -m celery worker` processes run a sync no-op task in the gevent pool, 64
greenlets each. Not the default prefork pool nor `solo`/`threads`: with those the worker
fires due ETA timers from its event loop, at most 10 per loop turn and then waits up to
1 s for I/O (kombu's Hub.fire_timers), so 2,000 tasks due in one second took 106 s to
start here with `solo`, and `solo` at 800/s sustained left p99 at 113 s; the gevent pool
has a timer of its own (gevent: 2,000 at once all started in 0.7 s; 800/s p99 0.28 s).
BENCH_PEERS_CELERY_POOL overrides it (`solo`, `threads:64`, `prefork:2`). Tasks are
published with `apply_async(eta=due)` on one producer, each second's ~2 s ahead; a Celery
worker holds ETA tasks in its memory (unacknowledged) until they are due, so there is no
beat process for one-off tasks.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from urllib.parse import unquote, urlsplit, urlunsplit

from bench.load import Arrival
from bench.peers.celery_app import BROKER_ENV, QUEUE, app, noop
from bench.peers.common import (
    BROKER,
    RECORD_DIR_ENV,
    Args,
    Processes,
    parse_args,
    report,
    result,
    run_dir,
    run_load,
    version,
    wait_until,
)

WORKERS = 2
POOL = os.environ.get("BENCH_PEERS_CELERY_POOL", "gevent:64")  # or "solo", "threads:N", ...
# ~1,000 apply_async/s here: the top scenario's default lead allows for it
CREATE_S = 0.001


def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, stdout=subprocess.DEVNULL)


@contextmanager
def fresh_vhost() -> Iterator[str]:
    """A vhost of its own on the local RabbitMQ for the broker user, deleted afterwards."""
    url = urlsplit(BROKER)
    vhost = f"peers-celery-{uuid.uuid4().hex[:8]}"
    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl("set_permissions", "-p", vhost, unquote(url.username or "guest"),
                    ".*", ".*", ".*")  # fmt: skip
        yield urlunsplit(url._replace(path="/" + vhost))
    finally:
        rabbitmqctl("delete_vhost", vhost)


def worker_argv(name: str) -> list[str]:
    pool, _, concurrency = POOL.partition(":")
    return [
        sys.executable, "-m", "celery", "-A", "bench.peers.celery_app", "worker",
        "--hostname", f"{name}@%h", "--queues", QUEUE, "--pool", pool,
        *(["--concurrency", concurrency] if concurrency else []),
        "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "WARNING",
    ]  # fmt: skip


async def drive(args: Args) -> None:
    with run_dir() as records, fresh_vhost() as broker:
        app.conf.broker_url = broker
        processes = Processes({**os.environ, RECORD_DIR_ENV: str(records), BROKER_ENV: broker})
        try:
            for i in range(1, WORKERS + 1):
                processes.start(f"worker-{i}", worker_argv(f"worker-{i}"))

            def ready() -> bool:
                return len(app.control.ping(timeout=0.5) or []) >= WORKERS

            wait_until(ready, "celery workers", processes, 60)
            arrivals = args.arrivals(datetime.now(UTC))
            with app.producer_or_acquire() as producer:

                async def create(group: list[Arrival]) -> None:
                    for a in group:
                        noop.apply_async((a.seq,), eta=a.due, producer=producer)

                late, peak = await run_load(args, arrivals, records, processes, create)
        finally:
            processes.stop()
        notes = (
            f"celery {version('celery')}: {WORKERS} workers, pool {POOL}, prefetch multiplier "
            f"{app.conf.worker_prefetch_multiplier}, without gossip/mingle/heartbeat, no result "
            f"backend; apply_async(eta=...) one by one on one producer, last creation "
            f"{late:+.2f}s vs deadline."
        )
        report(result("celery", args, arrivals, records, peak, notes))


if __name__ == "__main__":
    asyncio.run(drive(parse_args(__doc__, create_seconds_per_job=CREATE_S)))

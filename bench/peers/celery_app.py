"""The Celery app and its no-op task, apart from the driver so that the workers
(`python -m celery -A bench.peers.celery_app worker`) import it rather than the
driver's `__main__`."""

from __future__ import annotations

import os

from celery import Celery

from bench.peers.common import BROKER, record

BROKER_ENV = "BENCH_PEERS_BROKER_URL"
QUEUE = "bench"

app = Celery("bench", broker=os.environ.get(BROKER_ENV, BROKER), set_as_current=False)
app.conf.update(
    task_ignore_result=True,  # no result backend
    task_default_queue=QUEUE,
    timezone="UTC",
    enable_utc=True,
    # ETA tasks are held by the worker (each raises the channel's prefetch by one), so the
    # multiplier only bounds tasks without an ETA or already past it
    worker_prefetch_multiplier=64,
    worker_send_task_events=False,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="bench.noop", ignore_result=True)
def noop(seq: int) -> None:
    record(seq)

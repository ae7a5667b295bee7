"""The APScheduler 3 process of the benchmark: a BlockingScheduler on a SQLAlchemy job
store in Postgres, running the no-op job in its thread pool, and taking new jobs over a
local RPC (a `multiprocessing.connection` Unix socket).

APScheduler 3 cannot share a job store between processes: a scheduler wakes for jobs that
it added itself, or on its own timer (computed from the earliest job it knows about), so
jobs written to the store by another process would wait for an unrelated wake-up. Its FAQ
says to run one scheduler process and reach it over RPC (it shows RPyC); this is that,
with the standard library, taking a list of (seq, due) per call.

    python -m bench.peers.apscheduler_server SOCKET   (env: BENCH_PEERS_DATABASE_URL)
"""

from __future__ import annotations

import os
import sys
import threading
import time
from datetime import UTC, datetime
from multiprocessing.connection import Connection, Listener
from urllib.parse import urlsplit, urlunsplit

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.schedulers.blocking import BlockingScheduler

from bench.peers.common import record

DB_ENV = "BENCH_PEERS_DATABASE_URL"
AUTHKEY = b"horae-bench-peers"
THREADS = 20  # the default executor's pool: plenty for a no-op job
NOOP = "bench.peers.apscheduler_server:noop"  # by reference: jobs are pickled into the store


def noop(seq: int) -> None:
    record(seq)


def sqlalchemy_url(url: str) -> str:
    """postgresql://... for SQLAlchemy with psycopg 3 (the driver the other peers use)."""
    return urlunsplit(urlsplit(url)._replace(scheme="postgresql+psycopg"))


def make_scheduler(db: str) -> BlockingScheduler:
    return BlockingScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=sqlalchemy_url(db))},
        executors={"default": ThreadPoolExecutor(THREADS)},
        # the default misfire grace time (1 s) would silently drop late runs: the
        # benchmark wants every run, however late, and reports the lateness
        job_defaults={"misfire_grace_time": None, "coalesce": False},
        timezone=UTC,
    )


def add_jobs(scheduler: BaseScheduler, jobs: list[tuple[int, datetime]]) -> None:
    for seq, due in jobs:
        scheduler.add_job(NOOP, "date", run_date=due, args=(seq,), id=str(seq))


def serve(scheduler: BaseScheduler, listener: Listener) -> None:
    while not scheduler.running:
        time.sleep(0.05)
    while True:
        conn: Connection = listener.accept()
        with conn:
            while True:
                try:
                    jobs = conn.recv()
                except EOFError:
                    break
                add_jobs(scheduler, jobs)
                conn.send(len(jobs))


def main() -> None:
    scheduler = make_scheduler(os.environ[DB_ENV])
    listener = Listener(sys.argv[1], family="AF_UNIX", authkey=AUTHKEY)
    threading.Thread(target=serve, args=(scheduler, listener), daemon=True).start()
    scheduler.start()


if __name__ == "__main__":
    main()

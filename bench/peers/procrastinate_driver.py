"""Procrastinate as a peer: one-off jobs deferred with `schedule_at`, two workers.

    .venv-peers/bin/python -m bench.peers.procrastinate_driver --scenario sustained --rate R --seconds S
    .venv-peers/bin/python -m bench.peers.procrastinate_driver --scenario top --count N [--lead S]

A fresh database gets Procrastinate's schema; two `python -m procrastinate worker`
processes (log level warning) run an async no-op task with concurrency 64 each. A job scheduled in the future is found by a
worker's poll (LISTEN/NOTIFY only wakes it when a job is deferred, not when it falls due),
so the poll interval is lowered from the default 5 s to 0.1 s. Each second's jobs are
inserted in one statement (`JobManager.batch_defer_jobs_async`, each job its own
`schedule_at`); finished jobs are kept (the default), like Horae's full history.
"""  # noqa: E501

from __future__ import annotations

import asyncio
import os
import sys
from datetime import UTC, datetime

import psycopg

from bench.load import Arrival
from bench.peers.common import (
    RECORD_DIR_ENV,
    Args,
    Processes,
    fresh_database,
    parse_args,
    report,
    result,
    run_dir,
    run_load,
    version,
    wait_until,
)
from bench.peers.procrastinate_app import APP, DB_ENV, POOL, make_app

WORKERS = 2
CONCURRENCY = 64
POLL = 0.1  # seconds between a worker's polls for jobs that have fallen due
CHUNK = 1000  # jobs per insert statement


def worker_argv(name: str) -> list[str]:
    return [
        sys.executable, "-m", "procrastinate", "--app", APP, "--log-level", "warning",
        "worker", "--name", name, "--concurrency", str(CONCURRENCY),
        "--fetch-job-polling-interval", str(POLL),
    ]  # fmt: skip


async def drive(args: Args) -> None:
    with run_dir() as records, fresh_database("procrastinate") as db:
        peers = make_app(db)
        task = peers.tasks["bench.noop"]
        processes = Processes({**os.environ, RECORD_DIR_ENV: str(records), DB_ENV: db})
        async with peers.open_async():
            await peers.schema_manager.apply_schema_async()
            try:
                for i in range(1, WORKERS + 1):
                    processes.start(f"worker-{i}", worker_argv(f"worker-{i}"))

                def ready() -> bool:
                    with psycopg.connect(db) as conn:
                        row = conn.execute("SELECT count(*) FROM procrastinate_workers").fetchone()
                        return row is not None and row[0] >= WORKERS

                wait_until(ready, "procrastinate workers", processes, 60)
                arrivals = args.arrivals(datetime.now(UTC))

                async def create(group: list[Arrival]) -> None:
                    for i in range(0, len(group), CHUNK):
                        jobs = [
                            task.configure(schedule_at=a.due).make_new_job(seq=a.seq)
                            for a in group[i : i + CHUNK]
                        ]
                        await peers.job_manager.batch_defer_jobs_async(jobs=jobs)

                late, peak = await run_load(args, arrivals, records, processes, create)
            finally:
                processes.stop()
        notes = (
            f"procrastinate {version('procrastinate')}: {WORKERS} workers x concurrency "
            f"{CONCURRENCY} (async no-op), fetch polling {POLL}s, pool "
            f"{POOL['min_size']}-{POOL['max_size']}, jobs kept; created with "
            f"batch_defer_jobs_async ({CHUNK}/statement), last creation {late:+.2f}s vs deadline."
        )
        report(result("procrastinate", args, arrivals, records, peak, notes))


if __name__ == "__main__":
    asyncio.run(drive(parse_args(__doc__)))

"""Sustained throughput: one-off executions arriving at a constant rate, one scheduler and
two workers (no-op handler), everything on this machine. Prints executions/s completed
with full history recorded, and the start lag (handler start - due) p50/p99 at that rate.

    .venv/bin/python -m bench.throughput [--rate 500] [--seconds 30] [--workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from bench.dispatch_spike import pct
from horae.models import JobSource, JobSpec
from horae.store import jobs
from horae.store.db import connect_pool
from horae.store.migrate import migrate
from tests.support.kube import start_control_plane, stop_control_plane

REPO = Path(__file__).resolve().parents[1]
BASE_DB = os.environ.get("HORAE_DATABASE_URL", "postgresql://horae:horae@127.0.0.1:5432/horae")
BROKER = os.environ.get("HORAE_BROKER_URL", "amqp://horae:horae@127.0.0.1:5672/horae")
TASKS = REPO / "bench" / "noop_tasks.py"


def _db(name: str) -> str:
    return urlunsplit(urlsplit(BASE_DB)._replace(path="/" + name))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=500, help="executions due per second")
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()

    name = f"horae_tput_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(BASE_DB)
    await admin.execute(f'CREATE DATABASE "{name}"')
    plane = start_control_plane(Path(tempfile.mkdtemp(prefix="horae-bench-k8s-")))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        await migrate(_db(name))
        env = {**os.environ, **plane.env, "HORAE_DATABASE_URL": _db(name),
               "HORAE_BROKER_URL": BROKER, "HORAE_BROKER_PREFIX": f"tput{uuid.uuid4().hex[:6]}",
               "HORAE_NAMESPACE": "default", "HORAE_LOG_LEVEL": "WARNING"}  # fmt: skip
        horae = str(Path(sys.executable).parent / "horae")
        commands = [[horae, "scheduler"]] + [
            [horae, "worker", "--tasks", str(TASKS), "--concurrency", str(args.concurrency)]
            for _ in range(args.workers)
        ]
        for i, cmd in enumerate(commands):
            procs.append(
                subprocess.Popen(  # noqa: ASYNC220 (started once, runs beside us)
                    cmd, cwd=REPO, env={**env, "HORAE_IDENTITY": f"tput-{i}"}
                )
            )
        pool = await connect_pool(_db(name), size=4)
        await asyncio.sleep(5)  # shards taken, queues declared
        print(f"throughput: {args.rate}/s due for {args.seconds}s; 1 scheduler, "
              f"{args.workers} workers x {args.concurrency}; {os.cpu_count()} cores")  # fmt: skip
        start = datetime.now(UTC) + timedelta(seconds=3)
        created = 0
        t0 = time.monotonic()
        async with pool.acquire() as conn:
            for second in range(args.seconds):
                # each second's executions, spread evenly over that second, created ~2 s ahead
                base = start + timedelta(seconds=second)
                batch = [
                    jobs.NewJob(
                        spec=JobSpec(
                            task="bench.noop", run_at=base + timedelta(seconds=k / args.rate)
                        ),
                        tenant=f"t{k % 10}",
                        source=JobSource.API,
                    )
                    for k in range(args.rate)
                ]
                for i in range(0, len(batch), 1000):
                    await jobs.create_jobs(conn, batch[i : i + 1000], shards=64,
                                           now=datetime.now(UTC))  # fmt: skip
                created += len(batch)
                ahead = (base - datetime.now(UTC)).total_seconds() - 2
                if ahead > 0:
                    await asyncio.sleep(ahead)
        total = args.rate * args.seconds
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = await pool.fetchval("SELECT count(*) FROM executions WHERE status = 'succeeded'")
            if done >= total:
                break
            await asyncio.sleep(1)
        rows = await pool.fetch(
            "SELECT started_at - due_at AS lag, finished_at FROM executions "
            "WHERE status = 'succeeded'"
        )
        lags = [r["lag"].total_seconds() for r in rows]
        first_due = start
        last_finish = max(r["finished_at"] for r in rows)
        span = (last_finish - first_due).total_seconds()
        statements = await pool.fetchval(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database()"
        ) if await pool.fetchval(
            "SELECT count(*) FROM pg_extension WHERE extname = 'pg_stat_statements'"
        ) else None  # fmt: skip
        await pool.close()
        print(f"completed {len(rows)}/{total} in {span:.1f}s after the first due time "
              f"-> {len(rows) / span:.0f} executions/s sustained "
              f"(generator kept up: {time.monotonic() - t0:.1f}s for {args.seconds}s)")  # fmt: skip
        print(f"start lag (s): p50 {pct(lags, 50):.3f}  p99 {pct(lags, 99):.3f}  "
              f"max {max(lags):.3f}")  # fmt: skip
        if statements is not None:
            print(f"postgres statements recorded: {statements}")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
        stop_control_plane(plane)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())

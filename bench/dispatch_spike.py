"""Dispatch spike: N executions due in the same second across all shards, two scheduler
replicas on this machine; prints the dispatch lag (publish confirmed - due) p50/p99/max.

Starts its own etcd + kube-apiserver (hack/k8s-up.sh), a fresh database on the local
PostgreSQL and a fresh RabbitMQ prefix; no workers (messages stay on the queue).

    .venv/bin/python -m bench.dispatch_spike [--count 10000] [--replicas 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from horae.models import JobSource, JobSpec
from horae.store import jobs
from horae.store.db import connect_pool
from horae.store.migrate import migrate
from tests.support.kube import start_control_plane, stop_control_plane

REPO = Path(__file__).resolve().parents[1]
BASE_DB = os.environ.get("HORAE_DATABASE_URL", "postgresql://horae:horae@127.0.0.1:5432/horae")
BROKER = os.environ.get("HORAE_BROKER_URL", "amqp://horae:horae@127.0.0.1:5672/horae")


def _db(name: str) -> str:
    return urlunsplit(urlsplit(BASE_DB)._replace(path="/" + name))


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--lead", type=float, default=20.0, help="seconds until the spike")
    args = parser.parse_args()

    name = f"horae_spike_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(BASE_DB)
    await admin.execute(f'CREATE DATABASE "{name}"')
    plane = start_control_plane(Path(tempfile.mkdtemp(prefix="horae-bench-k8s-")))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        await migrate(_db(name))
        env = {**os.environ, **plane.env, "HORAE_DATABASE_URL": _db(name),
               "HORAE_BROKER_URL": BROKER, "HORAE_BROKER_PREFIX": f"spike{uuid.uuid4().hex[:6]}",
               "HORAE_NAMESPACE": "default",
               "HORAE_LOG_LEVEL": os.environ.get("HORAE_LOG_LEVEL", "WARNING")}  # fmt: skip
        horae = str(Path(sys.executable).parent / "horae")
        for i in range(args.replicas):
            procs.append(
                subprocess.Popen(  # noqa: ASYNC220 (started once, runs beside us)
                    [horae, "scheduler"], cwd=REPO, env={**env, "HORAE_IDENTITY": f"spike-{i}"}
                )
            )
        pool = await connect_pool(_db(name), size=4)
        due = (datetime.now(UTC) + timedelta(seconds=args.lead)).replace(microsecond=0)
        new = [jobs.NewJob(spec=JobSpec(task="bench.noop", run_at=due), tenant=f"t{i % 10}",
                           source=JobSource.API) for i in range(args.count)]  # fmt: skip
        async with pool.acquire() as conn:
            for i in range(0, len(new), 1000):
                await jobs.create_jobs(conn, new[i : i + 1000], shards=64, now=datetime.now(UTC))
        print(f"dispatch_spike: {args.count} executions due at {due:%H:%M:%S} across 64 shards, "
              f"{args.replicas} scheduler replicas, {os.cpu_count()} cores")  # fmt: skip
        deadline = time.monotonic() + args.lead + 120
        while time.monotonic() < deadline:
            left = await pool.fetchval("SELECT count(*) FROM executions WHERE status = 'scheduled'")
            if left == 0 and datetime.now(UTC) > due:
                break
            await asyncio.sleep(0.5)
        rows = await pool.fetch("SELECT enqueued_at - due_at AS lag FROM executions")
        lags = [r["lag"].total_seconds() for r in rows if r["lag"] is not None]
        owners = await pool.fetch("SELECT owner, count(*) FROM shard_epochs GROUP BY owner")
        await pool.close()
        print(f"shards per replica: {sorted((r['owner'], r['count']) for r in owners)}")
        print(f"dispatched {len(lags)}/{args.count}; dispatch lag (s): "
              f"p50 {pct(lags, 50):.3f}  p99 {pct(lags, 99):.3f}  max {max(lags):.3f}  "
              f"mean {statistics.fmean(lags):.3f}")  # fmt: skip
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

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
import time
from datetime import UTC, datetime, timedelta

from bench.harness import horae_system, pct
from horae.models import JobSource, JobSpec
from horae.store import jobs
from horae.store.db import connect_pool


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--lead", type=float, default=20.0, help="seconds until the spike")
    args = parser.parse_args()

    async with horae_system("spike") as system:
        for i in range(args.replicas):
            system.start(f"spike-{i}", "scheduler")
        pool = await connect_pool(system.db_url, size=4)
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


if __name__ == "__main__":
    asyncio.run(main())

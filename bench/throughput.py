"""Sustained throughput: one-off executions arriving at a constant rate, created through
the job API (`POST /jobs:batch`, about 2 s ahead), one scheduler and two workers (no-op
handler), everything on this machine. Prints executions/s completed with full history
recorded, and the start lag (handler start - due) p50/p99 at that rate.

    .venv/bin/python -m bench.throughput [--rate 2000] [--seconds 30] [--workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp

from bench.harness import REPO, horae_system, pct
from horae.store.db import connect_pool

TASKS = REPO / "bench" / "noop_tasks.py"
TOKEN = "bench-token"
PORT = 18081


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=2000, help="executions due per second")
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()

    async with horae_system("tput") as system:
        tokens = Path(tempfile.mkdtemp()) / "tokens"
        tokens.write_text(f"{TOKEN},bench\n")
        system.env |= {"HORAE_API_TOKENS_FILE": str(tokens), "HORAE_API_KUBERNETES_AUTH": "false"}
        system.start("tput-api", "api", "--port", str(PORT))
        system.start("tput-0", "scheduler")
        for i in range(args.workers):
            system.start(f"tput-{i + 1}", "worker", "--tasks", str(TASKS),
                         "--concurrency", str(args.concurrency))  # fmt: skip
        pool = await connect_pool(system.db_url, size=4)
        await asyncio.sleep(5)  # API up, shards taken, queues declared
        print(f"throughput: {args.rate}/s due for {args.seconds}s, created through the API; "
              f"1 scheduler, {args.workers} workers x {args.concurrency}; "
              f"{os.cpu_count()} cores")  # fmt: skip
        start = datetime.now(UTC) + timedelta(seconds=3)
        t0 = time.monotonic()
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with aiohttp.ClientSession(f"http://127.0.0.1:{PORT}", headers=headers) as http:
            for second in range(args.seconds):
                # each second's executions, spread evenly over that second, created ~2 s ahead
                base = start + timedelta(seconds=second)
                batch = [
                    {"task": "bench.noop",
                     "run_at": (base + timedelta(seconds=k / args.rate)).isoformat()}
                    for k in range(args.rate)
                ]  # fmt: skip
                for i in range(0, len(batch), 1000):
                    async with http.post("/jobs:batch", json={"jobs": batch[i : i + 1000]}) as r:
                        assert r.status == 201, await r.text()
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


if __name__ == "__main__":
    asyncio.run(main())

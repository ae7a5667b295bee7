"""A scheduler's memory with N executions due within its preload window: capped by
HORAE_PRELOAD_MAX_ROWS (the default, 100,000) against no cap (the behaviour before the cap),
on the local PostgreSQL.

Each measurement is a fresh process holding a scheduler's dispatcher, which takes all 64
shards and reads the window once (`refresh`, as a scheduler does on start); its resident
memory is printed before and after. Nothing is published: the rows are due minutes ahead.

    .venv/bin/python -m bench.preload_memory [--rows 1000000] [--caps 100000,0]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import cast

import asyncpg

from bench.harness import scratch_database

PENDING = """
INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,
                        job_version)
SELECT gen_random_uuid(), gen_random_uuid(), 't', 'bench.noop', (i % 64)::smallint, d, d, 1, 1
FROM generate_series($1::bigint, $2::bigint) AS i,
     LATERAL (SELECT $3::timestamptz + (i % 60000) * interval '1 millisecond') AS x(d)
"""


def rss_mib() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process, in MiB."""
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)


async def child(url: str, cap: int) -> None:
    from horae.broker import Publisher
    from horae.scheduler.dispatcher import Dispatcher
    from horae.store.db import Database, connect_pool

    async def fenced(shard: int) -> None:
        raise AssertionError(shard)

    pool = await connect_pool(url, size=2)
    d = Dispatcher(
        Database(pool),
        cast(Publisher, None),  # nothing is due before the process ends: never published
        identity="bench",
        window=timedelta(minutes=10),
        refresh_period=timedelta(seconds=2),
        lease_valid=lambda s: True,
        on_fenced=fenced,
        max_rows=cap or 10**12,
    )
    before, _ = rss_mib()
    started = time.monotonic()
    for shard in range(64):
        await d.gain(shard)
    await d.refresh()
    took = time.monotonic() - started
    after, peak = rss_mib()
    label = f"{cap:,}" if cap else "none (before the cap)"
    print(
        f"cap {label:>22} | held {len(d.held()):>9,} | RSS {before:6.0f} -> {after:6.0f} MiB"
        f" | peak {peak:6.0f} MiB | read in {took:5.1f} s",
        flush=True,
    )
    await pool.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--caps", default="100000,0", help="0: no cap")
    args = parser.parse_args()
    async with scratch_database("horae_preload_mem") as url:
        conn = await asyncpg.connect(url)
        due = datetime.now(UTC) + timedelta(minutes=4)
        started = time.monotonic()
        step = 200_000
        for first in range(1, args.rows + 1, step):
            await conn.execute(PENDING, first, min(first + step - 1, args.rows), due)
        await conn.execute("VACUUM ANALYZE executions")
        await conn.close()
        print(
            f"{args.rows:,} executions due within the window, inserted in "
            f"{time.monotonic() - started:.0f} s"
        )
        for cap in (int(c) for c in args.caps.split(",")):
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.preload_memory", "--child", url, str(cap)
            )
            if await process.wait():
                raise SystemExit(f"the measurement with cap {cap} failed")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        asyncio.run(child(sys.argv[2], int(sys.argv[3])))
    else:
        asyncio.run(main())

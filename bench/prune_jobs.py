"""What deleting ended jobs costs the hourly maintenance (migration 025): `--ended` completed
one-offs that ended 31-40 days ago (their runs already dropped with their partitions), among
`--live` recurring jobs created as long ago (which a pass reads once: the scan goes through
`jobs_tenant_created` from each tenant's oldest row) and `--recent` one-offs that
ended yesterday (never read), spread over `--tenants`; then the maintenance with 30 days of
retention, timed, with the WAL it wrote. On the local PostgreSQL, in a scratch database with
the daily partitions that retention keeps (empty: a candidate's look for executions left
goes through each of them).

    .venv/bin/python -m bench.prune_jobs [--ended 1000000 --live 100000 --recent 200000]
    .venv/bin/python -m bench.prune_jobs --recent 0 --under-load 1600
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from datetime import UTC, datetime, timedelta

import asyncpg

from bench.harness import scratch_database
from horae.store.migrate import PRUNE_BATCH, maintain_partitions

JOBS = """
INSERT INTO jobs (id, tenant, source, task, run_at, cron, retry_policy, shard, state,
                  fires_per_minute, last_run_at, last_status, created_at, updated_at)
SELECT gen_random_uuid(), 'tenant-' || (i % $3), 'api', 'bench.noop',
       CASE WHEN $5 THEN NULL ELSE t END, CASE WHEN $5 THEN '0 * * * *' END, '{}',
       (i % 64)::smallint, $6::job_state, 1, t, 'succeeded', t - interval '1 minute', t
FROM generate_series($1::bigint, $2::bigint) AS i,
     LATERAL (SELECT $4::timestamptz - ((i * 2591) % (9 * 86400)) * interval '1 second') AS x(t)
"""


LOADED_FOR = 25.0
"""With `--under-load`: seconds of load before the pass."""
WINDOW = re.compile(r"^\[horae [0-9:]+\] +[0-9s]+ +")
"""The driver's line per 5 s (starts a second, p99 lag, ...) and its header."""


async def load(
    conn: asyncpg.Connection, n: int, tenants: int, at: datetime, *, cron: bool, state: str
) -> None:
    step = 500_000
    for lo in range(1, n + 1, step):
        await conn.execute(JOBS, lo, min(n, lo + step - 1), tenants, at, cron, state)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ended", type=int, default=1_000_000)
    parser.add_argument("--live", type=int, default=100_000)
    parser.add_argument("--recent", type=int, default=200_000)
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--batch", type=int, default=PRUNE_BATCH)
    parser.add_argument(
        "--under-load",
        type=int,
        default=0,
        metavar="RATE",
        help="run the sustained scenario at RATE for 60 s meanwhile, the pass from +25 s",
    )
    args = parser.parse_args()
    today = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    async with scratch_database("horae_prune") as db:
        conn = await asyncpg.connect(db)
        for back in range(30):  # the partitions a 30-day retention keeps, as in production
            await conn.execute(
                "SELECT horae_create_partition($1)", (today - timedelta(days=back)).date()
            )
        await load(conn, args.ended, args.tenants, today - timedelta(days=31), cron=False,
                   state="completed")  # fmt: skip
        await load(conn, args.live, args.tenants, today - timedelta(days=31), cron=True,
                   state="active")  # fmt: skip
        await load(conn, args.recent, args.tenants, today - timedelta(days=1), cron=False,
                   state="completed")  # fmt: skip
        await conn.execute("VACUUM ANALYZE jobs")
        driver = None
        if args.under_load:  # its own stores; the same PostgreSQL, the same two cores
            driver = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.horae_driver", "--scenario", "sustained",
                "--rate", str(args.under_load), "--seconds", "60",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            await asyncio.sleep(LOADED_FOR)
        lsn = await conn.fetchval("SELECT pg_current_wal_lsn()")
        began = time.monotonic()
        done = await maintain_partitions(
            conn, today=today.date(), ahead_days=1, retention_days=30, batch=args.batch
        )
        seconds = time.monotonic() - began
        wal = await conn.fetchval("SELECT pg_current_wal_lsn() - $1::pg_lsn", lsn)
        left = await conn.fetchval("SELECT count(*) FROM jobs")
        await conn.close()
        if driver is not None:
            out, err = await driver.communicate()
            windows = [line for line in err.decode().splitlines() if WINDOW.match(line)]
            span = f"+{LOADED_FOR:g} s to +{LOADED_FOR + seconds:.0f} s"
            print(f"the sustained scenario at {args.under_load}/s, the pass from {span}:")
            print(*windows, sep="\n")
            result = json.loads(out.decode().strip().splitlines()[-1])
            print(f"started {result['started']:,} of {result['expected']:,}")
    assert done.pruned == args.ended, (done.pruned, args.ended)
    assert left == args.live + args.recent, left
    figures = {
        "ended": args.ended,
        "live": args.live,
        "recent": args.recent,
        "tenants": args.tenants,
        "batch": args.batch,
        "seconds": round(seconds, 2),
        "rows_per_second": round(done.pruned / seconds),
        "wal_bytes_per_row": round(float(wal) / max(done.pruned, 1)),
    }
    print(
        f"deleted {done.pruned:,} ended jobs in {seconds:.1f} s ({figures['rows_per_second']:,}"
        f"/s, {figures['wal_bytes_per_row']} B of WAL each) among {args.live:,} live and "
        f"{args.recent:,} recently ended, {args.tenants} tenants, batches of {args.batch:,}"
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    asyncio.run(main())

"""The claim's cost on a scratch database: `EXPLAIN (ANALYZE, BUFFERS)` of one worker claim
of `--claim` queued rows among `--rows` executions (rolled back). The claim is a function
(`horae_claim`, migration 004): its time and buffers are shown in all, not statement by
statement.

    .venv/bin/python -m bench.explain_claim --rows 100000 --claim 1000

Creates and drops a scratch database next to HORAE_DATABASE_URL's.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime, timedelta

from bench.harness import scratch_database
from horae.models import JobSource, JobSpec
from horae.store import jobs
from horae.store.db import connect_pool
from horae.store.queries import Q


async def main(rows: int, claim: int) -> None:
    async with scratch_database("horae_explain") as url:
        print("\n".join(await plan(url, rows, claim)))


async def plan(url: str, rows: int, claim: int) -> list[str]:
    now = datetime.now(UTC)
    pool = await connect_pool(url, size=2)
    try:
        async with pool.acquire() as conn:
            for start in range(0, rows, 5000):
                await jobs.create_jobs(conn, [
                    jobs.NewJob(spec=JobSpec(task="t", run_at=now + timedelta(seconds=1 + i % 60)),
                                tenant=f"t{i % 10}", source=JobSource.API)
                    for i in range(start, min(rows, start + 5000))
                ], shards=64, now=now)  # fmt: skip
            await conn.execute("ANALYZE")
            picked = sorted(await conn.fetch(
                "SELECT id, due_at, tenant FROM executions ORDER BY random() LIMIT $1", claim
            ), key=lambda r: r["id"])  # fmt: skip
            ids, dues = [r["id"] for r in picked], [r["due_at"] for r in picked]
            named = [r["tenant"] for r in picked]  # as the messages name them
            serves = sorted(set(named))
            await conn.execute("UPDATE executions SET status = 'queued' WHERE id = ANY($1)", ids)
            claim_tx = conn.transaction()
            await claim_tx.start()
            try:
                lease, throttle = timedelta(seconds=30), timedelta(seconds=1)
                lines = await conn.fetch(
                    "EXPLAIN (ANALYZE, BUFFERS) " + Q["claim"],
                    ids,
                    dues,
                    named,
                    serves,
                    "w",
                    now,
                    lease,
                    throttle,
                )
            finally:
                await claim_tx.rollback()
            return [r[0] for r in lines]
    finally:
        await pool.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--claim", type=int, default=1000)
    args = parser.parse_args()
    asyncio.run(main(args.rows, args.claim))

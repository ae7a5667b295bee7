"""API ingest benchmark: creates/s through `POST /jobs` and jobs/s through `POST /jobs:batch`.

Starts `horae api` (static dev token, no Kubernetes calls) against a fresh database on
the local PostgreSQL, drives it from this process with aiohttp (httpx's client tops out
well below the server here), prints the figures.

    .venv/bin/python -m bench.api_ingest [--seconds 10] [--workers 2] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import asyncpg

from bench.harness import scratch_database

REPO = Path(__file__).resolve().parents[1]
TOKEN = "bench-token"


def _job(i: int) -> dict[str, object]:
    at = datetime.now(UTC) + timedelta(minutes=10, seconds=i % 3600)
    return {"task": "bench.noop", "run_at": at.isoformat(), "payload": {"n": i}}


async def _drive(url: str, seconds: float, concurrency: int, batch: int | None) -> tuple[int, int]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    done = 0
    errors = 0
    deadline = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(url, headers=headers, connector=connector) as session:

        async def loop() -> None:
            nonlocal done, errors
            i = 0
            while time.monotonic() < deadline:
                i += 1
                if batch is None:
                    path, body, n = "/jobs", _job(i), 1
                else:
                    path, n = "/jobs:batch", batch
                    body = {"jobs": [_job(i * batch + k) for k in range(batch)]}
                async with session.post(path, json=body) as r:
                    await r.read()
                    if r.status == 201:
                        done += n
                    else:
                        errors += 1

        await asyncio.gather(*(loop() for _ in range(concurrency)))
    return done, errors


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--workers", type=int, default=2, help="uvicorn worker processes")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--port", type=int, default=18080)
    args = parser.parse_args()

    tokens = Path(tempfile.mkdtemp()) / "tokens"
    tokens.write_text(f"{TOKEN},bench\n")
    async with scratch_database("horae_bench") as db:
        await _measure(args, db, tokens)


async def _measure(args: argparse.Namespace, db: str, tokens: Path) -> None:
    # The bench tenant's quotas lifted: the default 100,000 live jobs would cap the batch
    # step (about 90,000 in 10 s) and turn the rest into 429s.
    conn = await asyncpg.connect(db)
    await conn.execute(
        "INSERT INTO tenants (name, max_jobs, max_fires_per_minute)"
        " VALUES ('bench', 100000000, 100000000)"
    )
    await conn.close()
    proc = None
    try:
        env = {**os.environ, "HORAE_DATABASE_URL": db, "HORAE_API_TOKENS_FILE": str(tokens),
               "HORAE_API_KUBERNETES_AUTH": "false", "HORAE_LOG_LEVEL": "WARNING",
               "HORAE_DATABASE_POOL_SIZE": "20"}  # fmt: skip
        cmd = [str(Path(sys.executable).parent / "horae"), "api", "--port", str(args.port),
               "--workers", str(args.workers)]  # fmt: skip
        proc = subprocess.Popen(cmd, env=env, cwd=REPO)  # noqa: ASYNC220 (started once, not awaited)
        url = f"http://127.0.0.1:{args.port}"
        async with aiohttp.ClientSession() as c:
            for _ in range(200):
                try:
                    async with c.get(f"{url}/readyz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        print(f"api_ingest: {args.workers} API worker(s), PostgreSQL local, {os.cpu_count()} cores")
        print(f"command: {' '.join(cmd)}")
        n, err = await _drive(url, args.seconds, args.concurrency, None)
        single, errors = n / args.seconds, err
        print(
            f"single  POST /jobs       : {n / args.seconds:9.0f} creates/s "
            f"({n} in {args.seconds:.0f}s, concurrency {args.concurrency}, {err} errors)"
        )
        n, err = await _drive(url, args.seconds, 4, args.batch_size)
        batch, errors = n / args.seconds, errors + err
        print(
            f"batch   POST /jobs:batch : {n / args.seconds:9.0f} jobs/s    "
            f"({n} in {args.seconds:.0f}s, {args.batch_size}/request, 4 in flight, {err} errors)"
        )
        conn = await asyncpg.connect(db)
        jobs = await conn.fetchval("SELECT count(*) FROM jobs")
        execs = await conn.fetchval("SELECT count(*) FROM executions")
        await conn.close()
        print(f"stored: {jobs} jobs, {execs} executions")
        figures = {"single_per_s": round(single), "batch_jobs_per_s": round(batch)}
        print(json.dumps(figures | {"errors": errors}))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=20)


if __name__ == "__main__":
    asyncio.run(main())

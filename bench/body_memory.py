"""What one request body costs the API process in memory (peak RSS growth).

For each case, starts a fresh `horae api` (one process, static dev token, no Kubernetes
calls) on a scratch database, reads its RSS once it is ready and has answered one small
request, sends the body, and prints the peak RSS growth (VmHWM after - VmRSS before) and
the status. The worst case of a JSON body is tiny containers (`{"jobs":[{},{},...]}`).

    .venv/bin/python -m bench.body_memory                 # this tree
    .venv/bin/python -m bench.body_memory --source /tmp/old-tree   # another checkout
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from bench.harness import scratch_database

TOKEN = "bench-token"
MIB = 1024 * 1024
REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Case:
    name: str
    path: str
    token: bool
    body: bytes
    parallel: int = 1
    """Requests sent at once (each with this body)."""


def _tiny_containers(prefix: bytes, size: int) -> bytes:
    """`prefix` + `{},{},...` + `]}`, `size` bytes in all."""
    count = (size - len(prefix) - 4) // 3
    return prefix + b"{}," * count + b"{}]}"


def _largest_valid_batch(size: int) -> bytes:
    at = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    blob = "x" * (size // 1000 - 120)
    return json.dumps(
        {"jobs": [{"task": "t", "run_at": at, "payload": {"b": blob}}] * 1000}
    ).encode()


def cases() -> list[Case]:
    return [
        Case(
            "anonymous 32 MiB {} batch",
            "/jobs:batch",
            False,
            _tiny_containers(b'{"jobs":[', 32 * MIB),
        ),
        Case(
            "authenticated 8 MiB {} batch (batch limit)",
            "/jobs:batch",
            True,
            _tiny_containers(b'{"jobs":[', 8 * MIB),
        ),
        Case(
            "authenticated 8 MiB valid batch (1,000 jobs)",
            "/jobs:batch",
            True,
            _largest_valid_batch(8 * MIB - 4096),
        ),
        Case(
            "authenticated 1 MiB [] payload create (single limit)",
            "/jobs",
            True,
            _tiny_containers(b'{"task":"t","cron":"* * * * *","payload":{"a":[', MIB - 1)[:-2]
            + b"]}}",
        ),
        Case(
            "4 x authenticated 8 MiB {} batch at once",
            "/jobs:batch",
            True,
            _tiny_containers(b'{"jobs":[', 8 * MIB),
            parallel=4,
        ),
        Case(
            "authenticated 1,001 x {} batch (count over)",
            "/jobs:batch",
            True,
            b'{"jobs":[' + b"{}," * 1000 + b"{}]}",
        ),
    ]


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _send(port: int, case: Case) -> str:
    """POST the whole body on a raw socket (the server may answer and close before the
    client is done sending); the status line, or what went wrong."""
    head = f"POST {case.path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
    if case.token:
        head += f"Authorization: Bearer {TOKEN}\r\n"
    head += f"Content-Length: {len(case.body)}\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=120) as conn:
        try:
            conn.sendall(head.encode() + case.body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered before the whole body was sent
        answer = b""
        try:
            while b"\r\n" not in answer:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                answer += chunk
        except ConnectionResetError:
            pass
    return answer.split(b"\r\n", 1)[0].decode() or "connection closed without an answer"


def _measure(case: Case, db: str, tokens: Path, source: Path, port: int) -> None:
    env = {
        **os.environ,
        "HORAE_DATABASE_URL": db,
        "HORAE_API_TOKENS_FILE": str(tokens),
        "HORAE_API_KUBERNETES_AUTH": "false",
        "HORAE_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(source),
    }
    cmd = [sys.executable, "-m", "horae", "api", "--port", str(port), "--workers", "1"]
    proc = subprocess.Popen(cmd, env=env, cwd=source)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                raise SystemExit(f"horae api exited with code {proc.returncode}")
            time.sleep(0.1)
        else:
            raise SystemExit("horae api did not become ready in 30 s")
        httpx.get(f"{url}/jobs", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        before = _status_kib(proc.pid, "VmRSS")
        started = time.perf_counter()
        with ThreadPoolExecutor(case.parallel) as threads:
            statuses = sorted(set(threads.map(lambda _: _send(port, case), range(case.parallel))))
        status = " ".join(s.removeprefix("HTTP/1.1 ") for s in statuses)
        elapsed = time.perf_counter() - started
        peak = _status_kib(proc.pid, "VmHWM")
        print(
            f"{case.name:55} {len(case.body) / MIB:5.1f} MiB  {status:28} "
            f"{elapsed:5.2f}s  RSS {before / 1024:5.0f} MiB, "
            f"peak +{(peak - before) / 1024:5.0f} MiB"
        )
    finally:
        proc.terminate()
        proc.wait(timeout=20)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--source",
        type=Path,
        default=REPO,
        help="the checkout whose `horae` to run",
    )
    parser.add_argument("--port", type=int, default=18091)
    parser.add_argument("--only", default="", help="run the cases whose name has this text")
    args = parser.parse_args()
    tokens = Path(tempfile.mkdtemp()) / "tokens"
    tokens.write_text(f"{TOKEN},bench\n")
    print(f"body_memory: horae api from {args.source}, one process")
    async with scratch_database("horae_bench") as db:
        for case in [c for c in cases() if args.only in c.name]:
            await asyncio.to_thread(_measure, case, db, tokens, args.source, args.port)


if __name__ == "__main__":
    asyncio.run(main())

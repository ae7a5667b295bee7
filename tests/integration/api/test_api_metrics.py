"""The API's own metrics and liveness as Prometheus and the kubelet see them: a real
`horae api` with two server processes behind one port, scraped and probed over HTTP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest_asyncio

from tests.support.kube import free_port
from tests.support.metrics import Samples, parse, value
from tests.support.processes import HORAE, REPO
from tests.support.wait import until

TOKEN = "metrics-token"
STALL_SECONDS = 2
POOL_SIZE = 3
JOB = {"task": "report", "cron": "*/5 * * * *"}


@dataclass
class Api:
    http: httpx.AsyncClient
    proc: subprocess.Popen[bytes]

    def shared_dir(self) -> Path:
        """The directory `horae api` gave its server processes (PROMETHEUS_MULTIPROC_DIR, in
        the environment they started with)."""
        some = self.server_processes()[0]
        environ = Path(f"/proc/{some}/environ").read_bytes().split(b"\0")
        [entry] = [e for e in environ if e.startswith(b"PROMETHEUS_MULTIPROC_DIR=")]
        return Path(entry.split(b"=", 1)[1].decode())

    def server_processes(self) -> list[int]:
        """The pids of uvicorn's server processes (children of `horae api`'s), but one that
        exits while they are read (a killed one being reaped)."""
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        return [int(pid) for pid in children.split() if _serves(int(pid))]


def _serves(pid: int) -> bool:
    """Whether `pid` is a live server process, not multiprocessing's resource tracker."""
    try:
        return b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (ProcessLookupError, FileNotFoundError):
        return False  # gone meanwhile


def start_api(db_url: str, tmp_path: Path, port: int) -> subprocess.Popen[bytes]:
    """`horae api --workers 2`, authenticating one static token (tenant `metrics`)."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN},metrics\n")
    return subprocess.Popen(
        [HORAE, "api", "--port", str(port), "--workers", "2"],
        env={**os.environ, "HORAE_DATABASE_URL": db_url, "HORAE_API_TOKENS_FILE": str(tokens),
             "HORAE_API_KUBERNETES_AUTH": "false", "HORAE_LOG_LEVEL": "WARNING",
             "HORAE_DATABASE_POOL_SIZE": str(POOL_SIZE),
             "HORAE_LIVENESS_STALL_SECONDS": str(STALL_SECONDS)},
        stdout=(tmp_path / "api.log").open("wb"), stderr=subprocess.STDOUT, cwd=REPO,
    )  # fmt: skip


@pytest_asyncio.fixture
async def api(db_url: str, tmp_path: Path) -> AsyncIterator[Api]:
    port = free_port()
    log = tmp_path / "api.log"
    proc = start_api(db_url, tmp_path, port)
    try:
        # No kept-alive connections: each request may reach either process, as a probe's.
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}",
            timeout=5,
            limits=httpx.Limits(max_keepalive_connections=0),
        ) as http:
            served = Api(http, proc)

            async def both_serving() -> bool:
                if proc.poll() is not None:
                    raise AssertionError(log.read_text())
                try:  # each process reports its pool (max: the pool size) once started
                    samples = parse((await http.get("/metrics")).text)
                except httpx.TransportError:
                    return False
                return most_connections(samples) == 2 * POOL_SIZE

            await until(both_serving, timeout=30, what="horae api's two processes serving")
            yield served
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        print(log.read_text(), file=sys.stderr)


def most_connections(samples: Samples) -> float:
    """`horae_store_connections{group="main", state="max"}`: the pools' sizes, added up."""
    return value(samples, "horae_store_connections", group="main", state="max")


def requests(samples: Samples, **labels: str) -> float:
    return value(samples, "horae_api_requests_total", **labels)


async def test_every_request_is_counted_by_route_template_method_and_status_over_all_processes(
    api: Api,
) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    created = await api.http.post("/jobs", json=JOB, headers=auth)
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    for _ in range(3):
        assert (await api.http.get(f"/jobs/{job_id}", headers=auth)).status_code == 200
    assert (await api.http.get(f"/jobs/{uuid.uuid4()}", headers=auth)).status_code == 404
    assert (await api.http.get(f"/jobs/{job_id}")).status_code == 401  # the gate refuses
    assert (await api.http.get("/no/such/route", headers=auth)).status_code == 404

    one = "/jobs/{job_id}"

    def counted(samples: Samples) -> dict[str, float]:
        return {
            "POST /jobs 201": requests(samples, route="/jobs", method="POST", status="201"),
            "GET one 200": requests(samples, route=one, method="GET", status="200"),
            "GET one 404": requests(samples, route=one, method="GET", status="404"),
            "GET one 401": requests(samples, route=one, method="GET", status="401"),
            "GET unmatched 404": requests(samples, route="unmatched", method="GET", status="404"),
            "GET one timed": value(
                samples, "horae_api_request_seconds_count", route=one, method="GET"
            ),
            "connections max": most_connections(samples),
        }

    expected = {
        "POST /jobs 201": 1,
        "GET one 200": 3,
        "GET one 404": 1,
        "GET one 401": 1,
        "GET unmatched 404": 1,
        "GET one timed": 5,
        "connections max": 2 * POOL_SIZE,
    }

    async def all_counted() -> bool:  # (a request is counted once its answer went out)
        return counted(parse((await api.http.get("/metrics")).text)) == expected

    await until(all_counted, timeout=10, what="every request counted")
    # Each scrape is served by either process (a new connection each): every one sums both.
    for _ in range(8):
        assert counted(parse((await api.http.get("/metrics")).text)) == expected


async def test_liveness_fails_while_one_server_process_is_stopped_and_the_other_answers(
    api: Api,
) -> None:
    stopped, _ = api.server_processes()

    async def liveness() -> int:
        return (await api.http.get("/healthz")).status_code

    async def failing() -> bool:
        return await liveness() == 503

    os.kill(stopped, signal.SIGSTOP)  # its event loop, threads and all, stand still
    try:
        await until(failing, timeout=STALL_SECONDS + 10, what="/healthz answering 503")
        answer = await api.http.get("/healthz")
        assert f"process {stopped}'s event loop has not turned" in answer.json()["detail"]
        assert (await api.http.get("/metrics")).status_code == 200  # the other one serves
    finally:
        os.kill(stopped, signal.SIGCONT)

    async def alive() -> bool:
        return await liveness() == 200

    await until(alive, timeout=10, what="/healthz answering 200 again")


async def test_a_killed_server_process_is_replaced_and_leaves_no_trace_in_liveness_or_gauges(
    api: Api,
) -> None:
    killed, kept = api.server_processes()
    shared = api.shared_dir()
    os.kill(killed, signal.SIGKILL)

    async def replacement() -> int | None:
        pids = api.server_processes()
        new = [p for p in pids if p not in (killed, kept)]
        # Serving once it beats (its gauges are written with its first beat).
        if killed in pids or len(new) != 1 or not (shared / f"beat-{new[0]}").exists():
            return None
        return new[0]

    await until(replacement, timeout=30, what="uvicorn's new server process beating")

    async def both_pools_counted_once() -> bool:
        # Probed, /healthz drops the killed process's heartbeat and its live gauges.
        assert (await api.http.get("/healthz")).status_code == 200
        samples = parse((await api.http.get("/metrics")).text)
        return most_connections(samples) == 2 * POOL_SIZE

    await until(both_pools_counted_once, timeout=20, what="the killed process's pool gone")
    assert not (shared / f"beat-{killed}").exists()

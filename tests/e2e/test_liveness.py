"""Liveness as the kubelet sees it, on a real worker process: a handler that blocks the
event loop turns /healthz to 503 (the kubelet would restart the pod) while the probe
thread still answers /metrics and /readyz, and /healthz recovers once the loop turns."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from horae.models import JobSource, JobSpec
from tests.support.invocations import invocations
from tests.support.kube import free_port
from tests.support.metrics import scrape, value
from tests.support.processes import Processes
from tests.support.store_rows import StoreRows
from tests.support.wait import until, until_ready

STALL_SECONDS = 2
BLOCK_SECONDS = 8

pytestmark = pytest.mark.usefixtures("shared_default_pool")


async def healthz(port: int) -> int:
    async with httpx.AsyncClient() as http:
        return (await http.get(f"http://127.0.0.1:{port}/healthz", timeout=5)).status_code


async def test_a_handler_blocking_the_event_loop_fails_liveness_while_metrics_still_answer(
    processes: Processes, stored: StoreRows, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "calls.jsonl"
    processes.start("worker", "worker", "--tasks", "tests/e2e/tasks.py", env={
        "HORAE_METRICS_PORT": str(port), "HORAE_LIVENESS_STALL_SECONDS": str(STALL_SECONDS),
        "HORAE_TEST_LOG": str(log)})  # fmt: skip
    processes.start("scheduler", "scheduler")
    assert (await until_ready(port)).startswith("consuming ")
    assert await healthz(port) == 200

    now = datetime.now(UTC)
    spec = JobSpec(task="e2e.blocking", run_at=now + timedelta(seconds=1),
                   payload={"seconds": BLOCK_SECONDS})  # fmt: skip
    job_id = await stored.create_job(spec, tenant="t", source=JobSource.API, now=now)

    async def failing() -> bool:
        return await healthz(port) == 503

    await until(failing, timeout=30, what="/healthz 503 while the handler blocks the loop")
    metrics = await scrape(f"http://127.0.0.1:{port}/metrics")
    assert value(metrics, "horae_in_flight") == 1, "the probe thread reports the blocked loop"
    assert (len(invocations(log)), invocations(log, "end")) == (1, []), "it still blocks"
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"http://127.0.0.1:{port}/readyz", timeout=5)).status_code == 200

    async def alive() -> bool:
        return await healthz(port) == 200

    await until(alive, timeout=BLOCK_SECONDS + 10, what="/healthz 200 once the loop turns")

    async def succeeded() -> bool:
        return await stored.count(
            "SELECT count(*) FROM executions WHERE job_id = $1 AND status = 'succeeded'", job_id
        ) == 1  # fmt: skip

    await until(succeeded, timeout=20, what="the execution succeeded")

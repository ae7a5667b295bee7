"""A worker that loses its RabbitMQ connection mid-handler finishes the handler and records
its outcome: the lease in Postgres protects the execution, not the channel. Before,
aio-pika cancelled the handling with the channel: the execution was neither recorded
nor handed back, and ran again once its lease ran out. (Found by the chaos suite.)"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote, urlsplit

import asyncpg
import pytest

from horae.models import JobSource, JobSpec
from tests.support.invocations import invocations
from tests.support.processes import Processes
from tests.support.store_rows import StoreRows
from tests.support.wait import until

TASKS = "tests/e2e/tasks.py"
pytestmark = pytest.mark.usefixtures("shared_default_pool")


def close_connections(vhost: str) -> int:
    """Close every AMQP connection of `vhost` server-side (this test's vhost only)."""
    listed = subprocess.run(["rabbitmqctl", "-q", "list_connections", "vhost", "pid"],
                            capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    pids = [line.split("\t")[1] for line in listed.stdout.splitlines()
            if line.split("\t")[0] == vhost]  # fmt: skip
    for pid in pids:
        subprocess.run(["rabbitmqctl", "-q", "close_connection", pid, "test: broker lost"],
                       capture_output=True, timeout=60, check=True)  # fmt: skip
    return len(pids)


async def test_a_handler_outlives_its_worker_losing_the_broker_connection(
    processes: Processes, stored: StoreRows, broker_url: str, tmp_path: Path
) -> None:
    vhost = unquote(urlsplit(broker_url).path.lstrip("/"))
    if shutil.which("rabbitmqctl") is None or not vhost.startswith("horae-test-"):
        pytest.skip("needs rabbitmqctl and a vhost of this test session's own")
    log = tmp_path / "calls.jsonl"
    env = {"HORAE_TEST_LOG": str(log), "HORAE_EXECUTION_LEASE_SECONDS": "3"}
    processes.start("scheduler", "scheduler")
    processes.start("worker", "worker", "--tasks", TASKS, env=env)
    now = datetime.now(UTC)
    spec = JobSpec(task="e2e.slow", run_at=now + timedelta(seconds=2), payload={"seconds": 4})
    job_id = await stored.create_job(spec, tenant="t", source=JobSource.API, now=now)

    async def started() -> bool:
        return bool(invocations(log))

    await until(started, timeout=30, what="the slow handler to start")
    assert await asyncio.to_thread(close_connections, vhost) >= 1

    async def finished() -> list[asyncpg.Record] | None:
        rows = await stored.fetch("SELECT * FROM executions WHERE job_id = $1", job_id)
        return rows if rows and all(r["finished_at"] for r in rows) else None

    rows = await until(finished, timeout=30, interval=0.2, what="the execution to finish")
    assert [(r["attempt"], r["status"]) for r in rows] == [(1, "succeeded")]
    assert len(invocations(log)) == 1 and len(invocations(log, "end")) == 1

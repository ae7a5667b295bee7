"""The walking skeleton: one ScheduledJob travels the whole path.

kubectl apply -> operator stores the job and its execution -> a scheduler
holding shard Leases publishes it at its due second -> a worker runs the
handler -> the execution ends `succeeded` and the ScheduledJob's status says so.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import httpx

from tests.support.kube import ControlPlane, free_port
from tests.support.processes import Processes
from tests.support.store_rows import StoreRows
from tests.support.wait import until


def manifest(name: str, namespace: str, run_at: datetime) -> str:
    return f"""
apiVersion: horae.dev/v1alpha1
kind: ScheduledJob
metadata:
  name: {name}
  namespace: {namespace}
spec:
  task: e2e.echo
  runAt: "{run_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}"
  payload: {{greeting: hello}}
"""


async def test_scheduled_job_fires_at_its_due_second_and_reports_succeeded(
    control_plane: ControlPlane, namespace: str, processes: Processes, stored: StoreRows
) -> None:
    scheduler_port, worker_port, operator_port = free_port(), free_port(), free_port()
    scheduler = processes.start(
        "scheduler", "scheduler", env={"HORAE_METRICS_PORT": str(scheduler_port)}
    )
    processes.start("worker", "worker", "--tasks", "tests/e2e/tasks.py",
                    env={"HORAE_METRICS_PORT": str(worker_port)})  # fmt: skip
    processes.start("operator", "operator", env={"HORAE_METRICS_PORT": str(operator_port)})

    async def all_shards_held() -> bool:
        leases = control_plane.get_json("leases", "-n", namespace)["items"]
        held = [
            x
            for x in leases
            if x["metadata"]["name"].startswith("horae-shard-") and x["spec"].get("holderIdentity")
        ]
        return len(held) == 64

    await until(all_shards_held, timeout=30, what="64 shard Leases held")
    assert scheduler.alive()

    run_at = datetime.now(UTC) + timedelta(seconds=5)
    control_plane.kubectl("apply", "-f", "-", input=manifest("hello", namespace, run_at))

    async def in_store() -> asyncpg.Record | None:
        return await stored.fetchrow(
            "SELECT * FROM jobs WHERE tenant = $1 AND name = 'hello'", namespace
        )

    job = await until(in_store, timeout=15, what="the job in the store")
    assert job["source"] == "crd" and job["task"] == "e2e.echo"
    assert job["payload"] == {"greeting": "hello"}

    async def finished() -> asyncpg.Record | None:
        return await stored.fetchrow(
            "SELECT * FROM executions WHERE job_id = $1 AND status NOT IN "
            "('scheduled', 'queued', 'running')",
            job["id"],
        )

    execution = await until(finished, timeout=30, what="a terminal execution")
    assert execution["status"] == "succeeded"
    assert execution["attempt"] == 1
    assert abs(execution["due_at"] - run_at) < timedelta(milliseconds=1)
    start_lag = execution["started_at"] - execution["due_at"]
    assert timedelta(0) <= start_lag < timedelta(seconds=2), start_lag

    async def status_succeeded() -> dict | None:
        obj = control_plane.get_json("scheduledjob", "hello", "-n", namespace)
        status = obj.get("status", {})
        return status if status.get("lastStatus") == "Succeeded" else None

    status = await until(status_succeeded, timeout=15, what="status.lastStatus Succeeded")
    assert status["jobId"] == str(job["id"])
    assert status["lastRunAt"] is not None
    columns = control_plane.kubectl("get", "sj", "hello", "-n", namespace).stdout
    assert "Succeeded" in columns and "e2e.echo" in columns

    scheduler_metrics = scrape(scheduler_port)
    assert scheduler_metrics["horae_owned_shards"] == 64
    assert scheduler_metrics['horae_lease_transitions_total{change="gained"}'] >= 64
    assert scheduler_metrics["horae_dispatch_lag_seconds_count"] >= 1
    assert scheduler_metrics["horae_dispatched_total"] >= 1
    worker_metrics = scrape(worker_port)
    assert worker_metrics["horae_start_lag_seconds_count"] >= 1
    assert worker_metrics['horae_outcomes_total{status="succeeded"}'] >= 1
    assert worker_metrics["horae_in_flight"] == 0
    # the operator's /metrics is its liveness and readiness probe in the chart
    assert any(name.startswith("process_resident_memory") for name in scrape(operator_port))


def scrape(port: int) -> dict[str, float]:
    """Prometheus text format -> {sample name with labels: value}."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples

"""The operator as Kubernetes users meet it: a ScheduledJob's life through kubectl, and
its executions as `kubectl get executions` shows them."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg

from tests.support.kube import ControlPlane
from tests.support.processes import Processes
from tests.support.wait import until


def manifest(namespace: str, schedule: str, *, suspend: bool = False) -> str:
    return f"""
apiVersion: horae.dev/v1alpha1
kind: ScheduledJob
metadata: {{name: ticker, namespace: {namespace}}}
spec:
  task: e2e.echo
  schedule: "{schedule}"
  suspend: {str(suspend).lower()}
  historyLimit: 3
"""


def mirrors(control_plane: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    return control_plane.get_json(
        "executions", "-n", namespace, "-l", "horae.dev/job=ticker"
    )["items"]  # fmt: skip


async def test_a_scheduledjob_through_apply_suspend_edit_and_delete(
    control_plane: ControlPlane, namespace: str, processes: Processes, pool: asyncpg.Pool
) -> None:
    processes.start("operator", "operator")
    processes.start("scheduler", "scheduler")
    processes.start("worker", "worker", "--tasks", "tests/e2e/tasks.py")
    control_plane.kubectl("apply", "-f", "-", input=manifest(namespace, "*/2 * * * * *"))
    uid = control_plane.get_json("sj", "ticker", "-n", namespace)["metadata"]["uid"]
    job_id = uuid.UUID(uid)

    async def succeeded() -> int:
        return int(await pool.fetchval(
            "SELECT count(*) FROM executions WHERE job_id = $1 AND status = 'succeeded'", job_id
        ))  # fmt: skip

    # fires, and its executions show up (pruned to historyLimit: 3) as Succeeded
    await until(lambda: _at_least(succeeded, 5), timeout=40, what="five successful runs")

    async def three_succeeded_mirrors() -> list[dict[str, Any]] | None:
        items = mirrors(control_plane, namespace)
        done = [i for i in items if i["status"]["status"] == "Succeeded"]
        return items if len(items) == 3 and len(done) >= 2 else None

    items = await until(three_succeeded_mirrors, timeout=20, what="3 mirrors, Succeeded")
    for item in items:
        assert item["metadata"]["ownerReferences"][0]["uid"] == uid
        assert item["status"]["jobId"] == uid and item["status"]["attempt"] == 1
    table = control_plane.kubectl("get", "executions", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "JOB", "ATTEMPT", "STATUS", "DUE", "STARTED", "DURATION"]
    assert any(row.split()[1:4] == ["ticker", "1", "Succeeded"] for row in table[1:])

    # suspend: nothing fires while suspended
    control_plane.kubectl("apply", "-f", "-",
                          input=manifest(namespace, "*/2 * * * * *", suspend=True))  # fmt: skip

    async def paused() -> bool:
        state = await pool.fetchval("SELECT state FROM jobs WHERE id = $1", job_id)
        return state == "paused"

    await until(paused, timeout=15, what="the job paused")
    await asyncio.sleep(1)  # an execution already on the queue may still finish
    before = await succeeded()
    await asyncio.sleep(5)  # two and a half periods of the schedule
    assert await succeeded() == before, "a suspended job fired"
    assert control_plane.get_json("sj", "ticker", "-n", namespace)["status"]["conditions"][1][
        "status"
    ] == "True"  # fmt: skip

    # edit: resumed on a yearly schedule; the pending every-2s occurrence is cancelled
    control_plane.kubectl("apply", "-f", "-", input=manifest(namespace, "0 0 1 1 *"))

    async def next_run_is_new_year() -> str | None:
        status = control_plane.get_json("sj", "ticker", "-n", namespace).get("status", {})
        next_run = status.get("nextRunAt") or ""
        return next_run if next_run.endswith("-01-01T00:00:00Z") else None

    await until(next_run_is_new_year, timeout=15, what="nextRunAt on the 1st of January")
    pending = await pool.fetch(
        "SELECT due_at, job_version FROM executions WHERE job_id = $1 AND status = 'scheduled'",
        job_id,
    )  # fmt: skip
    assert len(pending) == 1 and pending[0]["job_version"] == 2
    assert (pending[0]["due_at"].month, pending[0]["due_at"].day) == (1, 1)

    # delete: cancelled in the store, its Execution resources gone with it
    control_plane.kubectl("delete", "sj", "ticker", "-n", namespace, "--wait=true")
    assert await pool.fetchval("SELECT state FROM jobs WHERE id = $1", job_id) == "cancelled"
    assert await pool.fetchval(
        "SELECT count(*) FROM executions WHERE job_id = $1 AND status = 'scheduled'", job_id
    ) == 0  # fmt: skip
    assert mirrors(control_plane, namespace) == []


async def _at_least(probe: Any, n: int) -> bool:
    return bool(await probe() >= n)

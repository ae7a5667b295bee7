"""A ScheduledJob whose last attempt fails gets a Warning Event and shows Dead."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.support.kube import ControlPlane
from tests.support.processes import Processes
from tests.support.wait import until

MANIFEST = """
apiVersion: horae.dev/v1alpha1
kind: ScheduledJob
metadata: {{name: doomed, namespace: {ns}}}
spec:
  task: e2e.flaky
  runAt: "{run_at}"
  payload: {{fail_times: 99}}
  retryPolicy: {{maxAttempts: 2, initialIntervalSeconds: 0.2, maxIntervalSeconds: 0.5}}
"""


async def test_exhausted_retries_raise_an_event_on_the_scheduledjob(
    control_plane: ControlPlane, namespace: str, processes: Processes
) -> None:
    processes.start("operator", "operator")
    processes.start("scheduler", "scheduler")
    processes.start("worker", "worker", "--tasks", "tests/e2e/tasks.py")
    run_at = (datetime.now(UTC) + timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    control_plane.kubectl("apply", "-f", "-", input=MANIFEST.format(ns=namespace, run_at=run_at))

    async def dead_event() -> list[dict] | None:
        events = control_plane.get_json(
            "events", "-n", namespace, "--field-selector",
            "involvedObject.name=doomed,reason=ExecutionDead",
        )["items"]  # fmt: skip
        return events or None

    [event] = await until(dead_event, timeout=40, what="an ExecutionDead event")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "ScheduledJob"
    assert "dead-lettered" in event["message"]
    status = control_plane.get_json("scheduledjob", "doomed", "-n", namespace)["status"]
    assert status["lastStatus"] == "Dead"
    failing = {c["type"]: c for c in status["conditions"]}["Failing"]
    assert (failing["status"], failing["reason"]) == ("True", "Dead")

"""A ScheduledJob whose last attempt fails gets a Warning Event and shows Dead, whoever
records the death: the worker whose handler failed, or the reaper when the worker died."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.support.invocations import invocations
from tests.support.kube import ControlPlane
from tests.support.processes import Processes
from tests.support.wait import until
from tests.support.webhook import webhook_receiver

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


LOST = """
apiVersion: horae.dev/v1alpha1
kind: ScheduledJob
metadata: {{name: orphaned, namespace: {ns}}}
spec:
  task: e2e.slow
  runAt: "{run_at}"
  payload: {{seconds: 60}}
  retryPolicy: {{maxAttempts: 1}}
"""


async def test_a_death_the_reaper_finds_raises_the_event_and_reaches_the_webhook(
    control_plane: ControlPlane, namespace: str, processes: Processes, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    with webhook_receiver() as (url, alerts):
        processes.start("operator", "operator")
        processes.start("scheduler", "scheduler", env={"HORAE_DEAD_WEBHOOK_URL": url})
        victim = processes.start("worker", "worker", "--tasks", "tests/e2e/tasks.py", env={
            "HORAE_TEST_LOG": str(log), "HORAE_EXECUTION_LEASE_SECONDS": "2",
        })  # fmt: skip
        run_at = (datetime.now(UTC) + timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
        control_plane.kubectl("apply", "-f", "-", input=LOST.format(ns=namespace, run_at=run_at))

        async def started() -> bool:
            return len(invocations(log)) == 1

        await until(started, timeout=20, what="the slow handler to start")
        victim.kill()  # SIGKILL mid-run: only the reaper can end its last attempt

        async def dead_event() -> list[dict] | None:
            events = control_plane.get_json(
                "events", "-n", namespace, "--field-selector",
                "involvedObject.name=orphaned,reason=ExecutionDead",
            )["items"]  # fmt: skip
            return events or None

        [event] = await until(dead_event, timeout=30, what="an ExecutionDead event")

        async def alerted() -> bool:
            return bool(alerts)

        await until(alerted, timeout=15, what="the dead-execution webhook")
    assert event["type"] == "Warning" and "dead-lettered" in event["message"]
    [alert] = alerts
    assert (alert["type"], alert["job_name"], alert["tenant"]) == (
        "horae.execution.dead", "orphaned", namespace)  # fmt: skip
    assert (alert["attempt"], alert["error_kind"]) == (1, "lease_lost")
    status = control_plane.get_json("scheduledjob", "orphaned", "-n", namespace)["status"]
    assert status["lastStatus"] == "Dead"

"""What `kubectl get` and a ScheduledJob's status tell a user without a manual: when it runs
next, when it last ran and succeeded, conditions dated by their transitions, CronJob-style
history limits, and a run-now they can put in a manifest (`horae.dev/trigger`)."""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.kube import ControlPlane
from tests.support.processes import Processes
from tests.support.store_rows import StoreRows
from tests.support.wait import until

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def manifest(namespace: str, schedule: str, *, extra: str = "", trigger: str | None = None) -> str:
    annotations = f"annotations: {{horae.dev/trigger: '{trigger}'}}, " if trigger else ""
    return f"""
apiVersion: horae.dev/v1alpha1
kind: ScheduledJob
metadata: {{name: nightly, namespace: {namespace}, {annotations}}}
spec:
  task: e2e.echo
  schedule: "{schedule}"
{extra}"""


def scheduledjob(plane: ControlPlane, namespace: str) -> dict[str, Any]:
    return dict(plane.get_json("sj", "nightly", "-n", namespace))


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    [found] = [c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind]
    return dict(found)


async def test_kubectl_get_shows_the_next_run_as_a_time_and_ready_stays_dated_by_its_transition(
    control_plane: ControlPlane, namespace: str, processes: Processes, stored: StoreRows
) -> None:
    processes.start("operator", "operator", env={"HORAE_EXECUTION_MIRROR": "1"})  # opt-in
    processes.start("scheduler", "scheduler")
    processes.start("worker", "worker", "--tasks", "tests/e2e/tasks.py")
    limits = "  successfulJobsHistoryLimit: 2\n  failedJobsHistoryLimit: 1\n"
    control_plane.kubectl("apply", "-f", "-",
                          input=manifest(namespace, "*/2 * * * * *", extra=limits))  # fmt: skip
    job_id = uuid.UUID(scheduledjob(control_plane, namespace)["metadata"]["uid"])

    async def stored_once() -> dict[str, Any] | None:
        obj = scheduledjob(control_plane, namespace)
        conditions = obj.get("status", {}).get("conditions", [])
        return obj if any(c["type"] == "Ready" for c in conditions) else None

    first = await until(stored_once, timeout=30, what="the job stored (Ready)")
    ready = condition(first, "Ready")
    assert (ready["status"], ready["reason"], ready["observedGeneration"]) == ("True", "Stored", 1)
    assert first["status"]["observedGeneration"] == 1

    async def succeeded() -> int:
        return await stored.count(
            "SELECT count(*) FROM executions WHERE job_id = $1 AND status = 'succeeded'", job_id
        )

    async def runs_shown() -> dict[str, Any] | None:
        obj = scheduledjob(control_plane, namespace)
        status = obj.get("status", {})
        enough = await succeeded() >= 4 and status.get("lastSuccessfulTime")
        return obj if enough and status.get("lastScheduleTime") else None

    obj = await until(runs_shown, timeout=40, what="four runs, and their times in the status")
    status = obj["status"]
    assert condition(obj, "Ready")["lastTransitionTime"] == ready["lastTransitionTime"]
    assert condition(obj, "Failing")["status"] == "False"
    now = datetime.now(UTC)
    for field in ("lastScheduleTime", "lastSuccessfulTime", "nextRunAt"):
        assert RFC3339.match(status[field]), (field, status[field])
    last_schedule = datetime.fromisoformat(status["lastScheduleTime"])
    assert now - timedelta(seconds=30) < last_schedule <= now

    # the table a user reads: the next run as the instant it is (a `date` column printed
    # every future time as 0s), the last schedule as an age, as a CronJob's
    table = control_plane.kubectl("get", "sj", "-n", namespace).stdout.splitlines()
    assert table[0].split() == [
        "NAME", "TASK", "SCHEDULE", "SUSPEND", "LAST", "SCHEDULE", "NEXT", "RUN", "LAST",
        "STATUS", "AGE",
    ]  # fmt: skip
    row = table[1].split()
    assert row[:3] == ["nightly", "e2e.echo", "*/2"]
    next_run = next(cell for cell in row if RFC3339.match(cell))
    assert datetime.fromisoformat(next_run) > now - timedelta(seconds=5)
    assert "Succeeded" in row
    print("\n" + "\n".join(table))  # (the report quotes what a user sees)
    wide = control_plane.kubectl("get", "sj", "-n", namespace, "-o", "wide").stdout
    assert wide.splitlines()[0].split()[-2:] == ["READY", "AGE"]
    assert "UTC" in wide.splitlines()[1]

    # CronJob-style limits: at most the 2 newest Succeeded mirrors, besides live ones
    async def pruned() -> list[dict[str, Any]] | None:
        items = control_plane.get_json(
            "executions.horae.dev", "-n", namespace, "-l", "horae.dev/job=nightly"
        )["items"]
        ended = [i for i in items if i["status"]["status"] not in ("Queued", "Running")]
        return items if ended and len(ended) <= 2 else None

    items = await until(pruned, timeout=20, what="Succeeded mirrors pruned to 2")
    assert all(i["status"]["manual"] is False for i in items)

    # more runs and an edit: Ready keeps its transition time; the generation moves on
    target = await succeeded() + 2
    control_plane.kubectl("apply", "-f", "-", input=manifest(
        namespace, "*/2 * * * * *", extra=limits + "  payload: {v: 2}\n"))  # fmt: skip

    async def edited() -> dict[str, Any] | None:
        obj = scheduledjob(control_plane, namespace)
        generation = condition(obj, "Ready").get("observedGeneration")
        return obj if generation == 2 and await succeeded() >= target else None

    obj = await until(edited, timeout=40, what="the edit observed and two more runs")
    assert obj["metadata"]["generation"] == obj["status"]["observedGeneration"] == 2
    assert condition(obj, "Ready")["lastTransitionTime"] == ready["lastTransitionTime"]

    # suspend: Suspended turns True (dated now), Ready stays as it was
    control_plane.kubectl("patch", "sj", "nightly", "-n", namespace, "--type=merge",
                          "-p", '{"spec":{"suspend":true}}')  # fmt: skip

    # (the store's change may be reported before the handler's own write marks generation 3
    # observed: the first Suspended=True can carry generation 2, so wait for the handler's)
    async def suspended() -> dict[str, Any] | None:
        obj = scheduledjob(control_plane, namespace)
        now_suspended = condition(obj, "Suspended")
        observed = now_suspended["status"] == "True" and now_suspended["observedGeneration"] == 3
        return obj if observed else None

    obj = await until(suspended, timeout=20, what="Suspended=True, generation 3 observed")
    assert obj["status"]["observedGeneration"] == 3
    assert condition(obj, "Ready")["lastTransitionTime"] == ready["lastTransitionTime"]
    assert condition(obj, "Suspended")["lastTransitionTime"] >= ready["lastTransitionTime"]


async def manual_executions(stored: StoreRows, job_id: uuid.UUID) -> list[Any]:
    return await stored.fetch(
        "SELECT id, status FROM executions WHERE job_id = $1 AND manual ORDER BY created_at",
        job_id,
    )


def events(plane: ControlPlane, namespace: str) -> list[tuple[str, str, str]]:
    found = plane.get_json("events", "-n", namespace,
                           "--field-selector", "involvedObject.name=nightly")  # fmt: skip
    return [(e["type"], e["reason"], e["message"]) for e in found["items"]]


async def test_each_new_trigger_value_runs_the_job_once_now_and_only_once(
    control_plane: ControlPlane, namespace: str, processes: Processes, stored: StoreRows
) -> None:
    operator = processes.start("operator", "operator", env={"HORAE_EXECUTION_MIRROR": "1"})
    processes.start("scheduler", "scheduler")
    processes.start("worker", "worker", "--tasks", "tests/e2e/tasks.py")
    # created with a value: that value is the starting point, nothing runs
    yearly = "0 0 1 1 *"
    control_plane.kubectl("apply", "-f", "-", input=manifest(namespace, yearly, trigger="v0"))
    job_id = uuid.UUID(scheduledjob(control_plane, namespace)["metadata"]["uid"])

    async def handled(value: str) -> dict[str, Any] | None:
        last = scheduledjob(control_plane, namespace).get("status", {}).get("lastTrigger")
        return last if last and last["value"] == value else None

    v0 = await until(lambda: handled("v0"), timeout=30, what="v0 recorded")
    assert v0.get("executionId") is None
    assert await manual_executions(stored, job_id) == []

    # a new value: one manual execution, now; it runs and its mirror says it was by hand
    control_plane.kubectl("annotate", "sj", "nightly", "-n", namespace,
                          "horae.dev/trigger=v1", "--overwrite")  # fmt: skip
    v1 = await until(lambda: handled("v1"), timeout=30, what="v1 handled")

    async def ran() -> list[Any] | None:
        found = await manual_executions(stored, job_id)
        return found if found and found[0]["status"] == "succeeded" else None

    [run] = await until(ran, timeout=30, what="the manual execution succeeded")
    assert v1["executionId"] == str(run["id"])

    async def mirrored() -> dict[str, Any] | None:
        items = control_plane.get_json("executions.horae.dev", "-n", namespace)["items"]
        found = [i for i in items if i["status"]["executionId"] == str(run["id"])]
        return found[0] if found and found[0]["status"]["status"] == "Succeeded" else None

    mirror = await until(mirrored, timeout=20, what="its Execution, Succeeded")
    assert mirror["status"]["manual"] is True
    assert ("Normal", "Triggered", f"horae.dev/trigger=v1: manual execution {run['id']}") in (
        events(control_plane, namespace)
    )
    # a schedule time is not a manual run's: nothing was scheduled yet
    assert scheduledjob(control_plane, namespace)["status"].get("lastScheduleTime") is None

    # the same value again (a re-apply) and an operator restart run nothing more: the next
    # value, handled after both, is the second manual execution only
    control_plane.kubectl("apply", "-f", "-", input=manifest(namespace, yearly, trigger="v1"))
    assert operator.stop() == 0
    processes.start("operator", "operator")
    control_plane.kubectl("annotate", "sj", "nightly", "-n", namespace,
                          "horae.dev/trigger=v2", "--overwrite")  # fmt: skip
    await until(lambda: handled("v2"), timeout=40, what="v2 handled")
    assert len(await manual_executions(stored, job_id)) == 2

    # suspended: a new value is refused, said in an Event, and never runs later
    control_plane.kubectl("patch", "sj", "nightly", "-n", namespace, "--type=merge",
                          "-p", '{"spec":{"suspend":true}}')  # fmt: skip

    async def state_is(state: str) -> bool:
        return await stored.fetchval("SELECT state FROM jobs WHERE id = $1", job_id) == state

    await until(lambda: state_is("paused"), timeout=20, what="the job paused")
    control_plane.kubectl("annotate", "sj", "nightly", "-n", namespace,
                          "horae.dev/trigger=v3", "--overwrite")  # fmt: skip
    v3 = await until(lambda: handled("v3"), timeout=30, what="v3 handled")
    assert v3.get("executionId") is None
    refused = [m for t, r, m in events(control_plane, namespace) if r == "TriggerRefused"]
    assert refused == [
        f"horae.dev/trigger=v3: job {job_id} is paused: only an active job can be triggered"
    ]
    control_plane.kubectl("patch", "sj", "nightly", "-n", namespace, "--type=merge",
                          "-p", '{"spec":{"suspend":false}}')  # fmt: skip

    await until(lambda: state_is("active"), timeout=20, what="the job resumed")
    control_plane.kubectl("annotate", "sj", "nightly", "-n", namespace,
                          "horae.dev/trigger=v4", "--overwrite")  # fmt: skip
    await until(lambda: handled("v4"), timeout=30, what="v4 handled")
    assert len(await manual_executions(stored, job_id)) == 3, "v3 ran after all"


async def test_a_busy_jobs_times_are_written_once_per_interval_and_a_new_outcome_at_once(
    control_plane: ControlPlane, namespace: str, processes: Processes, stored: StoreRows
) -> None:
    processes.start("operator", "operator", env={"HORAE_STATUS_INTERVAL_SECONDS": "4"})
    processes.start("scheduler", "scheduler")
    processes.start("worker", "worker", "--tasks", "tests/e2e/tasks.py")
    control_plane.kubectl("apply", "-f", "-", input=manifest(namespace, "* * * * * *"))
    job_id = uuid.UUID(scheduledjob(control_plane, namespace)["metadata"]["uid"])

    async def ran() -> dict[str, Any] | None:
        status = scheduledjob(control_plane, namespace).get("status", {})
        return status if status.get("lastStatus") == "Succeeded" else None

    await until(ran, timeout=20, what="status.lastStatus Succeeded")
    # Every second a run, but its status written once per 4 s: the resourceVersions seen
    # over 10 s of polling change 2 or 3 times, not 10.
    versions = []
    for _ in range(20):
        versions.append(scheduledjob(control_plane, namespace)["metadata"]["resourceVersion"])
        await asyncio.sleep(0.5)
    runs = await stored.count(
        "SELECT count(*) FROM executions WHERE job_id = $1 AND status = 'succeeded'", job_id
    )
    assert runs >= 10
    assert 2 <= len(set(versions)) <= 4, versions
    # What the status says changes (it fails now): written at once, not held for 4 s.
    control_plane.kubectl("patch", "sj", "nightly", "-n", namespace, "--type=merge",
                          "-p", '{"spec":{"task":"e2e.broken"}}')  # fmt: skip

    async def failing() -> dict[str, Any] | None:
        status = scheduledjob(control_plane, namespace).get("status", {})
        return status if status.get("lastStatus") == "Failed" else None

    failed_at = await stored.fetchval(
        "SELECT min(finished_at) FROM executions WHERE job_id = $1 AND status = 'failed'", job_id
    )
    status = await until(failing, timeout=10, what="status.lastStatus Failed")
    first_failure = await stored.fetchval(
        "SELECT min(finished_at) FROM executions WHERE job_id = $1 AND status = 'failed'", job_id
    )
    assert failed_at is None and first_failure is not None
    assert datetime.now(UTC) - first_failure < timedelta(seconds=3), status

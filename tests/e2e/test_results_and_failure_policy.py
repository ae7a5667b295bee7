"""What a user of ScheduledJobs sees of results and of the failure policy: a handler's return
value in its Execution (cut short when large) and in `horae executions`; a job failing every
run paused after `failurePolicy.pauseAfterConsecutiveFailures`, with conditions and an Event
saying why, resumed by toggling `spec.suspend`; a pause reason given by annotation."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from horae.resources import MIRRORED_RESULT_CHARS
from tests.support.kube import ControlPlane
from tests.support.processes import HORAE, REPO, Processes
from tests.support.store_rows import StoreRows
from tests.support.wait import until


def scheduledjob(namespace: str, name: str, spec: dict[str, Any], **annotations: str) -> str:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    body = {"apiVersion": "horae.dev/v1alpha1", "kind": "ScheduledJob", "metadata": meta}
    return json.dumps({**body, "spec": spec})


def horae_json(processes: Processes, *args: str) -> Any:
    """What `horae ARGS -o json` prints, parsed (the components' store settings)."""
    r = subprocess.run([HORAE, *args, "-o", "json"], capture_output=True, text=True,
                       env={**os.environ, **processes.env}, cwd=REPO, timeout=60,
                       check=False)  # fmt: skip
    assert r.returncode == 0, (args, r.stderr)
    return json.loads(r.stdout)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    [found] = [c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind]
    return dict(found)


def events(plane: ControlPlane, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.name={name},reason={reason}"
    return list(plane.get_json("events", "-n", namespace, "--field-selector", selector)["items"])


async def test_results_show_in_executions_and_a_failing_job_pauses_itself_saying_why(
    control_plane: ControlPlane, namespace: str, processes: Processes, stored: StoreRows
) -> None:
    processes.start("operator", "operator", env={"HORAE_EXECUTION_MIRROR": "1"})  # opt-in
    processes.start("scheduler", "scheduler")
    processes.start("worker", "worker", "--tasks", "tests/e2e/tasks.py")
    soon = (datetime.now(UTC) + timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    once = {"task": "e2e.report", "runAt": soon}
    manifests = [
        scheduledjob(namespace, "small", {**once, "payload": {"result": {"sent": 3}}}),
        scheduledjob(namespace, "large", {**once, "payload": {"rows": 400}}),
        scheduledjob(namespace, "huge", {**once, "payload": {"rows": 20000}}),
        scheduledjob(namespace, "doomed", {
            "task": "e2e.broken", "schedule": "* * * * * *", "retryPolicy": {"maxAttempts": 1},
            "failurePolicy": {"pauseAfterConsecutiveFailures": 2},
        }),
        scheduledjob(namespace, "quiet", {"task": "e2e.echo", "schedule": "0 9 * * *",
                                          "suspend": True},
                     **{"horae.dev/pause-reason": "INC-9: waiting on the vendor"}),
        scheduledjob(namespace, "noisy", {"task": "e2e.echo", "schedule": "0 9 * * *",
                                          "suspend": True},
                     **{"horae.dev/pause-reason": "x" * 501}),
    ]  # fmt: skip
    for text in manifests:
        control_plane.kubectl("apply", "-f", "-", input=text)

    async def mirrored(name: str) -> dict[str, Any] | None:
        items = control_plane.get_json(
            "executions.horae.dev", "-n", namespace, "-l", f"horae.dev/job={name}"
        )["items"]
        done = [i for i in items if i.get("status", {}).get("status") == "Succeeded"]
        return done[0]["status"] if done else None

    small = await until(lambda: mirrored("small"), timeout=30, what="small's Execution")
    assert (small["result"], small["resultTruncated"]) == ('{"sent":3}', False)
    large = await until(lambda: mirrored("large"), timeout=30, what="large's Execution")
    assert large["resultTruncated"] is True and large["result"].endswith("…")
    assert len(large["result"]) == MIRRORED_RESULT_CHARS
    assert large["result"].startswith('{"rows":[0,1,2,3,')
    # the store keeps the whole result: `horae executions` shows it
    [execution] = horae_json(processes, "executions", f"{namespace}/large")
    assert execution["result"] == {"rows": list(range(400))}
    # over 64 KiB: not stored, the run succeeds all the same and its result says why
    huge = await until(lambda: mirrored("huge"), timeout=30, what="huge's Execution")
    [execution] = horae_json(processes, "executions", f"{namespace}/huge")
    assert execution["result"] == {
        "horae.result_dropped": "result is 108900 bytes of JSON; the limit is 65536"
    }
    assert huge["result"] == json.dumps(execution["result"], separators=(",", ":"))

    async def paused() -> dict[str, Any] | None:
        obj = dict(control_plane.get_json("sj", "doomed", "-n", namespace))
        conditions = {c["type"] for c in obj.get("status", {}).get("conditions", [])}
        if "Ready" in conditions and condition(obj, "Ready")["reason"] == "TooManyFailures":
            return obj
        return None

    obj = await until(paused, timeout=30, what="doomed paused by its failure policy")
    job_id = uuid.UUID(obj["metadata"]["uid"])
    reason = obj["status"]["pausedReason"]
    assert reason.startswith("paused after 2 consecutive failures (last: execution ")
    assert reason.endswith(" failed: this payload can never work)")
    assert condition(obj, "Ready")["status"] == "False"
    suspended = condition(obj, "Suspended")
    assert (suspended["status"], suspended["reason"]) == ("True", "TooManyFailures")
    assert suspended["message"].startswith(reason) and "spec.suspend" in suspended["message"]

    async def announced() -> list[dict[str, Any]] | None:
        return events(control_plane, namespace, "doomed", "TooManyFailures") or None

    [event] = await until(announced, timeout=20, what="a TooManyFailures Event")
    assert event["type"] == "Warning" and event["message"].startswith(reason)
    job = await stored.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id)
    assert (job["state"], job["paused_for_failures"]) == ("paused", True)
    left = await stored.fetch(
        "SELECT status, error_kind FROM executions WHERE job_id = $1 AND status IN"
        " ('scheduled', 'cancelled')",
        job_id,
    )
    # what was pending when it paused was cancelled as a pause cancels it; nothing is left
    # (a run already dispatched is cancelled as stale when a worker claims it)
    found = {(r["status"], r["error_kind"]) for r in left}
    assert ("cancelled", "paused") in found and found <= {("cancelled", "paused"),
                                                          ("cancelled", "stale")}  # fmt: skip

    quiet = dict(control_plane.get_json("sj", "quiet", "-n", namespace))
    assert quiet["status"]["pausedReason"] == "INC-9: waiting on the vendor"
    assert condition(quiet, "Suspended")["message"] == "INC-9: waiting on the vendor"
    [refused] = events(control_plane, namespace, "noisy", "PauseReasonRefused")
    assert refused["message"] == (
        "annotation horae.dev/pause-reason: is 501 characters; the limit is 500; suspended"
        " without a reason"
    )
    noisy = dict(control_plane.get_json("sj", "noisy", "-n", namespace))
    assert condition(noisy, "Suspended")["status"] == "True"
    assert noisy["status"].get("pausedReason") is None

    # The failures' pause wins over spec.suspend false; true, then false again, resumes it.
    patch = ("patch", "sj", "doomed", "-n", namespace, "--type=merge", "-p")
    control_plane.kubectl(*patch, '{"spec":{"suspend":true}}')

    async def user_paused() -> bool:
        obj = dict(control_plane.get_json("sj", "doomed", "-n", namespace))
        return condition(obj, "Suspended")["reason"] == "Suspend"

    await until(user_paused, timeout=20, what="the pause made the user's")
    control_plane.kubectl(*patch, '{"spec":{"suspend":false,"task":"e2e.echo"}}')

    async def resumed() -> bool:
        row = await stored.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id)
        return row["state"] == "active" and row["last_status"] == "succeeded"

    await until(resumed, timeout=20, what="doomed resumed and running again")
    job = await stored.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id)
    assert (job["consecutive_failures"], job["paused_reason"]) == (0, None)

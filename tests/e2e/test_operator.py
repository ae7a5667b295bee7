"""The operator as Kubernetes users meet it: a ScheduledJob's life through kubectl, and
its executions as `kubectl get executions` shows them."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from tests.support.kube import ControlPlane, free_port
from tests.support.processes import REPO, Processes
from tests.support.store_rows import StoreRows
from tests.support.wait import readiness, until, until_ready


def manifest(namespace: str, schedule: str, *, suspend: bool = False, more: str = "") -> str:
    return f"""
apiVersion: horae.dev/v1alpha1
kind: ScheduledJob
metadata: {{name: ticker, namespace: {namespace}}}
spec:
  task: e2e.echo
  schedule: "{schedule}"
  suspend: {str(suspend).lower()}
  historyLimit: 3
{more}"""


def mirrors(control_plane: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    return control_plane.get_json(
        "executions.horae.dev", "-n", namespace, "-l", "horae.dev/job=ticker"
    )["items"]  # fmt: skip


async def test_a_scheduledjob_through_apply_suspend_edit_and_delete(
    control_plane: ControlPlane, namespace: str, processes: Processes, stored: StoreRows
) -> None:
    # With the opt-in mirror (the default is the aggregated API, test_aggregated_api.py).
    processes.start("operator", "operator", env={"HORAE_EXECUTION_MIRROR": "1"})
    processes.start("scheduler", "scheduler")
    processes.start("worker", "worker", "--tasks", "tests/e2e/tasks.py")
    control_plane.kubectl("apply", "-f", "-", input=manifest(namespace, "*/2 * * * * *"))
    uid = control_plane.get_json("sj", "ticker", "-n", namespace)["metadata"]["uid"]
    job_id = uuid.UUID(uid)

    async def succeeded() -> int:
        return await stored.count(
            "SELECT count(*) FROM executions WHERE job_id = $1 AND status = 'succeeded'", job_id
        )

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
    table = control_plane.kubectl(
        "get", "executions.horae.dev", "-n", namespace
    ).stdout.splitlines()
    assert table[0].split() == ["NAME", "JOB", "ATTEMPT", "STATUS", "DUE", "STARTED", "DURATION"]
    assert any(row.split()[1:4] == ["ticker", "1", "Succeeded"] for row in table[1:])

    # suspend: nothing fires while suspended
    control_plane.kubectl("apply", "-f", "-",
                          input=manifest(namespace, "*/2 * * * * *", suspend=True))  # fmt: skip

    async def paused() -> bool:
        state = await stored.fetchval("SELECT state FROM jobs WHERE id = $1", job_id)
        return state == "paused"

    await until(paused, timeout=15, what="the job paused")

    async def settled() -> bool:  # one already on the queue may still run and finish
        live = (
            "SELECT count(*) FROM executions WHERE job_id = $1 AND status IN ('queued', 'running')"
        )
        return await stored.count(live, job_id) == 0

    await until(settled, timeout=15, what="no execution of the paused job queued or running")
    before = await succeeded()
    await asyncio.sleep(5)  # two and a half periods of the schedule
    assert await succeeded() == before, "a suspended job fired"
    assert control_plane.get_json("sj", "ticker", "-n", namespace)["status"]["conditions"][1][
        "status"
    ] == "True"  # fmt: skip

    # edit: resumed on a yearly schedule, with a catch-up policy and window; the pending
    # every-2s occurrence is cancelled
    catch_up = "  catchUp: {policy: All, window: 1h30m}\n"
    control_plane.kubectl("apply", "-f", "-", input=manifest(namespace, "0 0 1 1 *", more=catch_up))

    async def next_run_is_new_year() -> str | None:
        status = control_plane.get_json("sj", "ticker", "-n", namespace).get("status", {})
        next_run = status.get("nextRunAt") or ""
        return next_run if next_run.endswith("-01-01T00:00:00Z") else None

    await until(next_run_is_new_year, timeout=15, what="nextRunAt on the 1st of January")
    pending = await stored.fetch(
        "SELECT due_at, job_version FROM executions WHERE job_id = $1 AND status = 'scheduled'",
        job_id,
    )  # fmt: skip
    assert len(pending) == 1 and pending[0]["job_version"] == 2
    assert (pending[0]["due_at"].month, pending[0]["due_at"].day) == (1, 1)
    job = await stored.fetchrow(
        "SELECT catch_up, catch_up_window_seconds FROM jobs WHERE id = $1", job_id
    )
    assert (job["catch_up"], job["catch_up_window_seconds"]) == ("All", 5400)

    # delete: cancelled in the store, its Execution resources gone with it
    control_plane.kubectl("delete", "sj", "ticker", "-n", namespace, "--wait=true")
    assert await stored.fetchval("SELECT state FROM jobs WHERE id = $1", job_id) == "cancelled"
    assert await stored.count(
        "SELECT count(*) FROM executions WHERE job_id = $1 AND status = 'scheduled'", job_id
    ) == 0  # fmt: skip
    assert mirrors(control_plane, namespace) == []


async def _at_least(probe: Any, n: int) -> bool:
    return bool(await probe() >= n)


async def test_server_side_apply_twice_is_a_no_op_and_diff_stays_empty(
    control_plane: ControlPlane, namespace: str, processes: Processes
) -> None:
    """What a GitOps tool sees: the operator never writes spec, so re-applying the same
    manifest changes nothing and `kubectl diff` reports no drift."""
    processes.start("operator", "operator")
    text = manifest(namespace, "0 9 * * 1")
    control_plane.kubectl("apply", "--server-side", "-f", "-", input=text)

    async def reconciled() -> dict[str, Any] | None:
        obj = control_plane.get_json("sj", "ticker", "-n", namespace)
        status = obj.get("status", {})
        ready = status.get("conditions", [{}])[0].get("status") == "True"
        return obj if ready and status.get("observedGeneration") == obj["metadata"][
            "generation"] else None  # fmt: skip

    first = await until(reconciled, timeout=20, what="the ScheduledJob reconciled")
    control_plane.kubectl("apply", "--server-side", "-f", "-", input=text)
    again = control_plane.get_json("sj", "ticker", "-n", namespace, "--show-managed-fields")
    assert again["metadata"]["generation"] == first["metadata"]["generation"] == 1
    for server_side in (["--server-side"], []):
        diff = control_plane.kubectl("diff", *server_side, "-f", "-", input=text, check=False)
        assert (diff.returncode, diff.stdout) == (0, ""), diff.stdout + diff.stderr
    spec_owners = {
        entry["manager"]
        for entry in again["metadata"]["managedFields"]
        if "f:spec" in entry.get("fieldsV1", {})
    }
    assert spec_owners == {"kubectl"}, f"spec fields owned by {spec_owners}"


def job_manifest(namespace: str, name: str) -> str:
    return f"""
apiVersion: horae.dev/v1alpha1
kind: ScheduledJob
metadata: {{name: {name}, namespace: {namespace}}}
spec: {{task: e2e.echo, schedule: "0 0 1 1 *"}}
"""


async def stored_state(stored: StoreRows, namespace: str, name: str) -> str | None:
    return await stored.fetchval(
        "SELECT state::text FROM jobs WHERE tenant = $1 AND name = $2 "
        "ORDER BY created_at DESC LIMIT 1", namespace, name,
    )  # fmt: skip


async def test_changes_made_while_the_operator_was_down_are_reconciled_when_it_returns(
    control_plane: ControlPlane, namespace: str, processes: Processes, stored: StoreRows
) -> None:
    env = {"HORAE_RESYNC_SECONDS": "2"}
    operator = processes.start("operator", "operator", env=env)
    for name in ("gone", "orphan"):
        control_plane.kubectl("apply", "-f", "-", input=job_manifest(namespace, name))

    async def both_stored() -> bool:
        states = [await stored_state(stored, namespace, n) for n in ("gone", "orphan")]
        return states == ["active", "active"]

    await until(both_stored, timeout=20, what="both jobs stored")
    assert operator.stop() == 0

    # while it is down: one created, one deleted, and one removed with its finalizer stripped
    control_plane.kubectl("apply", "-f", "-", input=job_manifest(namespace, "newcomer"))
    control_plane.kubectl("delete", "sj", "gone", "-n", namespace, "--wait=false")
    control_plane.kubectl("patch", "sj", "orphan", "-n", namespace, "--type=merge",
                          "-p", '{"metadata":{"finalizers":null}}')  # fmt: skip
    control_plane.kubectl("delete", "sj", "orphan", "-n", namespace)
    assert await stored_state(stored, namespace, "newcomer") is None

    processes.start("operator", "operator", env=env)

    async def reconciled() -> bool:
        names = ("newcomer", "gone", "orphan")
        states = {n: await stored_state(stored, namespace, n) for n in names}
        remaining = {i["metadata"]["name"] for i in control_plane.get_json(
            "sj", "-n", namespace)["items"]}  # fmt: skip
        return states == {"newcomer": "active", "gone": "cancelled", "orphan": "cancelled"} and (
            remaining == {"newcomer"}
        )

    await until(reconciled, timeout=30, what="created, deleted and orphaned jobs reconciled")

    # a job missing from the store (say, restored from an older backup) is stored again
    uid = control_plane.get_json("sj", "newcomer", "-n", namespace)["metadata"]["uid"]
    async with stored.on_job(uuid.UUID(uid)) as conn, conn.transaction():
        await conn.execute("DELETE FROM executions WHERE job_id = $1", uuid.UUID(uid))
        await conn.execute("DELETE FROM jobs WHERE id = $1", uuid.UUID(uid))

    async def restored() -> bool:
        return await stored.count(
            "SELECT count(*) FROM executions WHERE job_id = $1 AND status = 'scheduled'",
            uuid.UUID(uid),
        ) == 1  # fmt: skip

    await until(restored, timeout=20, what="the job stored again with its next execution")


def leader(control_plane: ControlPlane, namespace: str) -> str | None:
    leases = control_plane.get_json("leases", "-n", namespace)["items"]
    found = [x for x in leases if x["metadata"]["name"] == "horae-operator"]
    return found[0]["spec"].get("holderIdentity") if found else None


async def test_two_operators_never_both_act_and_the_standby_takes_over(
    control_plane: ControlPlane, namespace: str, processes: Processes, stored: StoreRows
) -> None:
    env = {"HORAE_OPERATOR_LEASE_SECONDS": "3"}
    first = processes.start("operator", "operator", env=env)

    async def leads(identity: str) -> bool:
        return leader(control_plane, namespace) == identity

    await until(lambda: leads(first.identity), timeout=20, what="the first operator leading")
    port = free_port()
    second = processes.start("operator", "operator", env={**env, "HORAE_METRICS_PORT": str(port)})
    assert await until_ready(port) == "standing by"
    control_plane.kubectl("apply", "-f", "-", input=job_manifest(namespace, "before"))

    async def active(name: str) -> bool:
        return await stored_state(stored, namespace, name) == "active"

    await until(lambda: active("before"), timeout=20, what="the job stored by the leader")
    for _ in range(4):  # the standby neither takes the Lease nor starts acting
        assert leader(control_plane, namespace) == first.identity
        await asyncio.sleep(1)
    assert await readiness(port) == (200, "standing by")
    assert second.alive()

    first.kill()
    killed = datetime.now(UTC)
    await until(lambda: leads(second.identity), timeout=20, what="the standby taking over")

    async def leading() -> bool:
        return await readiness(port) == (200, "leading")

    await until(leading, timeout=10, what="the new leader's /readyz saying so")
    # The standby dates each renewal as its watch delivers it and wakes when the last one
    # is a lease old: at most a lease duration after the crash, no poll period on top.
    took = (acquired(control_plane, namespace) - killed).total_seconds()
    assert took < 3 + 0.5, f"takeover took {took:.1f}s (Lease 3 s)"
    control_plane.kubectl("apply", "-f", "-", input=job_manifest(namespace, "after"))
    await until(lambda: active("after"), timeout=20, what="the job stored by the new leader")


def acquired(control_plane: ControlPlane, namespace: str) -> datetime:
    """When the leader Lease was last taken, by its own acquireTime (polling with kubectl
    would add its own latency to a measurement)."""
    lease = control_plane.get_json("lease", "horae-operator", "-n", namespace)
    return datetime.fromisoformat(lease["spec"]["acquireTime"])


async def test_a_clean_stop_of_the_leader_lets_the_standby_lead_within_two_seconds(
    control_plane: ControlPlane, namespace: str, processes: Processes
) -> None:
    """With the default lease (15 s). A standby that only polled the Lease (every lease/3)
    took up to 5 s; it watches the Lease and takes it as soon as the leader releases it."""
    first = processes.start("operator", "operator")

    async def leads(identity: str) -> bool:
        return leader(control_plane, namespace) == identity

    await until(lambda: leads(first.identity), timeout=20, what="the first operator leading")
    port = free_port()
    second = processes.start("operator", "operator", env={"HORAE_METRICS_PORT": str(port)})

    assert await until_ready(port) == "standing by"  # it has looked at the Lease once
    # Stop the leader right after the standby's first look: a standby waiting for its next
    # poll would take the Lease about 5 s later, a watching one as soon as it is released.
    sent = datetime.now(UTC)
    first.signal(signal.SIGTERM)
    await until(lambda: leads(second.identity), timeout=20, what="the standby taking over")
    took = (acquired(control_plane, namespace) - sent).total_seconds()
    assert 0 < took < 2, f"handover took {took:.2f}s"
    assert first.popen.wait(timeout=10) == 0
    assert second.alive()


def test_the_operators_service_account_may_do_only_what_the_operator_does(
    control_plane: ControlPlane, namespace: str, processes: Processes
) -> None:
    """Every operator test runs it under the chart's RBAC (see the `processes` fixture);
    this pins that the role stops short of what it does not need."""
    account = "system:serviceaccount:horae-system:horae-operator"

    def can(verb: str, resource: str, *, ns: str = namespace) -> bool:
        out = control_plane.kubectl("auth", "can-i", verb, resource, "-n", ns, "--as", account,
                                    check=False).stdout.strip()  # fmt: skip
        return out == "yes"

    allowed = [("patch", "scheduledjobs.horae.dev"), ("watch", "scheduledjobs.horae.dev"),
               ("patch", "scheduledjobs.horae.dev/status"), ("create", "executions.horae.dev"),
               ("deletecollection", "executions.horae.dev"), ("create", "events"),
               ("patch", "deployments.apps"), ("update", "leases.coordination.k8s.io"),
               ("watch", "leases.coordination.k8s.io")]  # fmt: skip
    refused = [("update", "scheduledjobs.horae.dev"), ("delete", "scheduledjobs.horae.dev"),
               ("create", "scheduledjobs.horae.dev"), ("delete", "deployments.apps"),
               ("get", "secrets"), ("list", "pods"),
               ("delete", "leases.coordination.k8s.io")]  # fmt: skip
    assert [a for a in allowed if not can(*a)] == []
    assert [r for r in refused if can(*r)] == []
    assert not can("update", "leases.coordination.k8s.io", ns="default"), "leases: own ns only"


async def test_a_spec_only_the_operator_can_judge_is_reported_in_status_and_an_event(
    control_plane: ControlPlane, namespace: str, processes: Processes, stored: StoreRows
) -> None:
    """`5-1 * * * *` passes the CRD's per-field patterns, but the range runs backwards:
    the operator refuses it."""
    processes.start("operator", "operator")
    control_plane.kubectl("apply", "-f", "-", input=manifest(namespace, "5-1 * * * *"))

    async def refused() -> dict[str, Any] | None:
        status = control_plane.get_json("sj", "ticker", "-n", namespace).get("status", {})
        ready = {c["type"]: c for c in status.get("conditions", [])}.get("Ready")
        return ready if ready and ready["status"] == "False" else None

    ready = await until(refused, timeout=20, what="Ready=False")
    assert ready["reason"] == "InvalidSpec" and ready["message"].startswith("spec.schedule")

    async def warned() -> list[dict[str, Any]] | None:
        events = control_plane.get_json(
            "events", "-n", namespace, "--field-selector", "involvedObject.name=ticker"
        )["items"]  # fmt: skip
        return [e for e in events if (e["type"], e["reason"]) == ("Warning", "InvalidSpec")] or None

    [event, *_] = await until(warned, timeout=20, what="a Warning event InvalidSpec")
    assert event["message"].startswith("spec.schedule: Value error, invalid cron")
    assert await stored_state(stored, namespace, "ticker") is None, "nothing half-written"


def _forwarder(listen: int, target: str) -> subprocess.Popen[bytes]:
    script = str(REPO / "tests" / "chaos" / "forward.py")
    return subprocess.Popen(
        [sys.executable, script, f"127.0.0.1:{listen}={target}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def test_a_leader_cut_off_from_the_api_server_stops_before_a_standby_could_lead(
    control_plane: ControlPlane, namespace: str, processes: Processes,
    component_kubeconfigs: dict[str, Path], tmp_path: Path,
) -> None:  # fmt: skip
    """A leader that cannot renew stops within its renew deadline (2/3 of the lease), so it
    is gone before a standby, which waits a whole lease after the last renewal it saw, may
    take over. It once kept acting until a renewal failed more than a lease after its last
    success, its calls hanging on the unreachable API server on top."""
    duration = 6.0
    config = yaml.safe_load(component_kubeconfigs["operator"].read_text())
    server = urlsplit(config["clusters"][0]["cluster"]["server"])
    port = free_port()
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    kubeconfig = tmp_path / "cut.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    forwarder = _forwarder(port, server.netloc)
    try:
        first = processes.start("operator", "operator", env={
            "KUBECONFIG": str(kubeconfig), "HORAE_OPERATOR_LEASE_SECONDS": str(duration),
        })  # fmt: skip

        async def leads() -> bool:
            return leader(control_plane, namespace) == first.identity

        await until(leads, timeout=30, what="the operator leading through the forwarder")
        forwarder.send_signal(signal.SIGSTOP)  # a partition: calls hang, nothing is refused
        exited = await asyncio.to_thread(first.popen.wait, 3 * duration)
        stopped = datetime.now(UTC)
        assert exited != 0
    finally:
        forwarder.send_signal(signal.SIGCONT)
        forwarder.kill()
        forwarder.wait()
    lease = control_plane.get_json("lease", "horae-operator", "-n", namespace)
    renewed = datetime.fromisoformat(lease["spec"]["renewTime"])
    assert lease["spec"]["holderIdentity"] == first.identity
    after = (stopped - renewed).total_seconds()
    # The earliest a standby could lead is a whole lease after this last renewal.
    assert after < duration, f"the leader stopped {after:.1f}s after its last renewal"


async def test_a_payload_over_the_apis_limit_is_refused_by_the_operator_naming_it(
    control_plane: ControlPlane, namespace: str, processes: Processes, stored: StoreRows
) -> None:
    """A ScheduledJob's payload obeys the API's 256 KiB (CEL cannot measure a serialized
    size): it was stored whatever its size, up to what etcd takes. Its status cannot say
    so (kopf's copy of the spec in an annotation would pass the annotations' own 256 KiB
    limit), so the Warning Event does."""
    processes.start("operator", "operator")
    body = {
        "apiVersion": "horae.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": "ticker", "namespace": namespace},
        "spec": {"task": "e2e.echo", "schedule": "* * * * *", "payload": {"b": "x" * 300_000}},
    }
    # `create`: `apply` would copy the manifest into an annotation, itself limited to 256 KiB.
    control_plane.kubectl("create", "-f", "-", input=json.dumps(body))

    async def warned() -> list[dict[str, Any]] | None:
        events = control_plane.get_json(
            "events", "-n", namespace, "--field-selector", "involvedObject.name=ticker"
        )["items"]
        return [e for e in events if (e["type"], e["reason"]) == ("Warning", "InvalidSpec")] or None

    [event, *_] = await until(warned, timeout=20, what="a Warning event InvalidSpec")
    assert event["message"] == (
        "spec.payload: Value error, payload is 300008 bytes; the limit is 262144"
    ), event["message"]
    assert await stored_state(stored, namespace, "ticker") is None

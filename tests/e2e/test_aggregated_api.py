"""`kubectl get executions` through the aggregation layer: kube-apiserver proxies to
`horae aggregated-api`, which reads the store. Listing with selectors, paging, one
execution as YAML, `kubectl explain`, a watch that sees a run start and end, RBAC per
namespace, and the 405 on writes; the operator writes no Execution into etcd."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from tests.e2e.test_first_job import scrape
from tests.support.aggregated import ExecutionsApi
from tests.support.kube import ControlPlane
from tests.support.processes import Processes
from tests.support.store_rows import StoreRows
from tests.support.wait import until

COLUMNS = ["NAME", "JOB", "ATTEMPT", "STATUS", "DUE", "STARTED", "DURATION"]


def scheduledjob(namespace: str, name: str, spec: str) -> str:
    return f"""
apiVersion: horae.dev/v1alpha1
kind: ScheduledJob
metadata: {{name: {name}, namespace: {namespace}}}
spec: {spec}
"""


def run_components(processes: Processes) -> None:
    """Operator (no mirror: the default), scheduler and a worker of the e2e tasks."""
    for name, *args in (("operator",), ("scheduler",), ("worker", "--tasks", "tests/e2e/tasks.py")):
        processes.start(name, name, *args)


def listed(plane: ControlPlane, namespace: str, *args: str) -> list[dict[str, Any]]:
    return list(plane.get_json("executions", "-n", namespace, *args)["items"])


async def test_kubectl_lists_selects_pages_and_gets_executions_from_the_store(
    control_plane: ControlPlane, namespace: str, processes: Processes, stored: StoreRows,
    executions_api: ExecutionsApi,
) -> None:  # fmt: skip
    run_components(processes)
    for name, spec in (
        ("ticker", '{task: e2e.echo, schedule: "* * * * * *"}'),
        ("doomed", '{task: e2e.broken, schedule: "*/2 * * * * *", retryPolicy: {maxAttempts: 1}}'),
    ):
        control_plane.kubectl("apply", "-f", "-", input=scheduledjob(namespace, name, spec))

    async def enough() -> bool:
        done = await stored.count(
            "SELECT count(*) FROM executions WHERE tenant = $1 AND status = 'failed'", namespace
        )
        return done >= 3

    await until(enough, timeout=40, what="three failed runs of doomed")
    control_plane.kubectl("patch", "sj", "ticker", "doomed", "-n", namespace, "--type=merge",
                          "-p", '{"spec":{"suspend":true}}')  # fmt: skip

    async def settled() -> int | None:
        # Both jobs paused in the store (the operator has acted on the suspension), and
        # nothing of theirs queued or running: the history stands still from here.
        active = await stored.count(
            "SELECT count(*) FROM jobs WHERE tenant = $1 AND state <> 'paused'", namespace
        )
        live = await stored.count(
            "SELECT count(*) FROM executions WHERE tenant = $1 AND status IN ('queued',"
            " 'running', 'scheduled') AND due_at <= now()", namespace,
        )  # fmt: skip
        return None if active or live else 1

    await until(settled, timeout=30, what="both jobs paused, nothing due, queued or running")
    rows = await stored.fetch(
        "SELECT e.id, j.name, e.status FROM executions e JOIN jobs j ON j.id = e.job_id"
        " WHERE e.tenant = $1 AND e.status <> 'scheduled'", namespace,
    )  # fmt: skip
    in_store = {r["id"]: (r["name"], r["status"]) for r in rows}

    # Every execution the store holds for the namespace, with the columns the CRD had.
    table = control_plane.kubectl("get", "executions", "-n", namespace).stdout.splitlines()
    assert table[0].split() == COLUMNS
    items = listed(control_plane, namespace)
    assert {uuid.UUID(i["metadata"]["uid"]) for i in items} == set(in_store)
    assert all(i["metadata"]["labels"]["horae.dev/job"] in ("ticker", "doomed") for i in items)
    wide = control_plane.kubectl("get", "ex", "-n", namespace, "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "JOB", "ATTEMPT", "STATUS", "MANUAL", "DUE", "STARTED",
                               "DURATION"]  # fmt: skip

    # Selectors: a job's, a phase's, both.
    ticker = listed(control_plane, namespace, "-l", "horae.dev/job=ticker")
    assert {i["metadata"]["uid"] for i in ticker} == {
        str(i) for i, (job, _) in in_store.items() if job == "ticker"
    }
    failed = listed(control_plane, namespace, "--field-selector", "status.phase=Failed")
    assert {i["metadata"]["uid"] for i in failed} == {
        str(i) for i, (_, status) in in_store.items() if status == "failed"
    }
    assert {i["metadata"]["labels"]["horae.dev/job"] for i in failed} == {"doomed"}
    assert listed(control_plane, namespace, "-l", "horae.dev/job=ticker",
                  "--field-selector", "status.phase=Failed") == []  # fmt: skip
    bad = control_plane.kubectl("get", "executions", "-n", namespace, "--field-selector",
                                "spec.task=x", check=False)  # fmt: skip
    assert bad.returncode == 1 and "field label not supported: spec.task" in bad.stderr

    # Paging: kubectl asks for pages of 3 and follows the continue tokens to the same list.
    paged = control_plane.kubectl("get", "executions", "-n", namespace, "--chunk-size=3",
                                  "-o", "name", "-v=6")  # fmt: skip
    assert paged.stderr.count("continue=") >= len(in_store) // 3 - 1, paged.stderr[-2000:]
    whole = control_plane.kubectl("get", "executions", "-n", namespace, "-o", "name").stdout
    assert paged.stdout == whole and len(whole.splitlines()) >= len(in_store)

    # Every namespace (the admin may list at the cluster scope): this one's among them.
    everywhere = control_plane.kubectl("get", "executions", "-A").stdout.splitlines()
    assert everywhere[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert sum(1 for line in everywhere if line.startswith(namespace + " ")) >= len(in_store)

    # A continue token of a list begun too long ago (15 minutes; this one's start is moved
    # back an hour) answers 410 Expired, as the API server's own do.
    base = f"/apis/runs.horae.dev/v1alpha1/namespaces/{namespace}/executions"
    page = json.loads(control_plane.kubectl("get", "--raw", f"{base}?limit=2").stdout)
    token = json.loads(base64.urlsafe_b64decode(page["metadata"]["continue"] + "=="))
    token["rv"] -= 3600 * 1_000_000
    old = base64.urlsafe_b64encode(json.dumps(token).encode()).decode().rstrip("=")
    expired = control_plane.kubectl("get", "--raw", f"{base}?limit=2&continue={old}",
                                    check=False)  # fmt: skip
    assert expired.returncode == 1 and "Expired" in expired.stderr, expired.stderr
    fresh = page["metadata"]["continue"]
    resumed = json.loads(
        control_plane.kubectl("get", "--raw", f"{base}?limit=2&continue={fresh}").stdout
    )
    assert not {i["metadata"]["uid"] for i in resumed["items"]} & {
        i["metadata"]["uid"] for i in page["items"]
    }

    # One execution, as YAML, as the store has it (the error whole).
    one = failed[0]
    name = one["metadata"]["name"]
    shown = yaml.safe_load(
        control_plane.kubectl("get", "execution", name, "-n", namespace, "-o", "yaml").stdout
    )
    row = await stored.fetchrow(
        "SELECT * FROM executions WHERE id = $1", uuid.UUID(shown["metadata"]["uid"])
    )
    assert name.startswith("doomed-") and name.endswith(row["id"].hex[:16])
    assert shown["apiVersion"] == "runs.horae.dev/v1alpha1" and shown["kind"] == "Execution"
    assert shown["status"]["phase"] == "Failed" and shown["status"]["attempt"] == 1
    assert shown["status"]["error"] == f"{row['error_kind']}: {row['error_message']}"
    assert shown["status"]["jobId"] == str(row["job_id"])
    missing = control_plane.kubectl("get", "execution", "doomed-0000000000000000", "-n",
                                    namespace, check=False)  # fmt: skip
    assert missing.returncode == 1
    assert 'executions.runs.horae.dev "doomed-0000000000000000" not found' in missing.stderr

    # Read-only: a write answers 405 naming what to change instead.
    refused = control_plane.kubectl("delete", "execution", name, "-n", namespace, check=False)
    assert refused.returncode == 1
    assert "read-only" in refused.stderr and "ScheduledJob" in refused.stderr
    assert uuid.UUID(shown["metadata"]["uid"]) in {
        r["id"]
        for r in await stored.fetch("SELECT id FROM executions WHERE tenant = $1", namespace)
    }

    # kubectl explain reads the OpenAPI the server publishes.
    async def explained() -> str | None:
        # (kube-apiserver fetches an APIService's OpenAPI on its own schedule)
        result = control_plane.kubectl("explain", "executions.status.phase", check=False)
        return result.stdout if result.returncode == 0 else None

    explanation = await until(explained, timeout=30, what="kubectl explain executions")
    assert "runs.horae.dev" in explanation and "TimedOut" in explanation

    # Nothing of it in etcd: the operator mirrors nothing by default.
    assert control_plane.get_json("executions.horae.dev", "-n", namespace)["items"] == []

    # The server counts what it answered, by verb and code.
    scraped = scrape(executions_api.metrics_port)
    assert scraped['horae_aggregated_requests_total{code="200",verb="list"}'] >= 5
    assert scraped['horae_aggregated_requests_total{code="200",verb="get"}'] >= 1
    assert scraped['horae_aggregated_requests_total{code="404",verb="get"}'] >= 1
    assert scraped['horae_aggregated_requests_total{code="405",verb="write"}'] >= 1
    assert scraped['horae_aggregated_requests_total{code="410",verb="list"}'] >= 1


async def test_a_watch_sees_a_run_start_and_end_within_a_second_of_the_store(
    control_plane: ControlPlane, namespace: str, processes: Processes, stored: StoreRows,
    executions_api: ExecutionsApi,
) -> None:  # fmt: skip
    run_components(processes)
    watch = await asyncio.create_subprocess_exec(
        str(control_plane.bin / "kubectl"), "--kubeconfig", str(control_plane.kubeconfig),
        "get", "executions", "-n", namespace, "--watch-only", "--no-headers",
        "-o", "custom-columns=JOB:.metadata.labels.horae\\.dev/job,PHASE:.status.phase",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    seen: dict[str, float] = {}
    try:
        # kubectl lists, then watches from the list's version: wait until its watch streams.
        async def streaming() -> bool:
            return scrape(executions_api.metrics_port).get("horae_aggregated_watches", 0) >= 1

        await until(streaming, timeout=10, what="kubectl's watch streaming from the server")
        at = (datetime.now(UTC) + timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
        spec = f'{{task: e2e.slow, runAt: "{at}", payload: {{seconds: 1}}}}'
        control_plane.kubectl("apply", "-f", "-", input=scheduledjob(namespace, "once", spec))
        assert watch.stdout is not None
        deadline = time.monotonic() + 30
        while "Succeeded" not in seen and time.monotonic() < deadline:
            line = await asyncio.wait_for(watch.stdout.readline(), 30)
            job, phase = line.decode().split()
            assert job == "once"
            seen.setdefault(phase, time.time())
    finally:
        watch.kill()
        await watch.wait()
    assert {"Running", "Succeeded"} <= set(seen), seen
    row = await stored.fetchrow(
        "SELECT started_at, finished_at FROM executions WHERE tenant = $1 AND status ="
        " 'succeeded'", namespace,
    )  # fmt: skip
    # Within a second of the store (a poll every 0.5 s), generously bounded here.
    assert seen["Running"] - row["started_at"].timestamp() < 2.0, seen
    assert seen["Succeeded"] - row["finished_at"].timestamp() < 2.0, seen


async def test_a_user_sees_executions_only_where_they_may_list_them(
    control_plane: ControlPlane, namespace: str, processes: Processes,
    executions_api: ExecutionsApi,
) -> None:  # fmt: skip
    other = f"{namespace}-b"
    control_plane.kubectl("create", "namespace", other)
    try:
        control_plane.kubectl("create", "serviceaccount", "reader", "-n", namespace)
        control_plane.kubectl("create", "role", "executions-reader", "-n", namespace,
                              "--verb=get,list,watch",
                              "--resource=executions.runs.horae.dev")  # fmt: skip
        control_plane.kubectl("create", "rolebinding", "reader", "-n", namespace,
                              "--role=executions-reader",
                              f"--serviceaccount={namespace}:reader")  # fmt: skip
        token = control_plane.kubectl("create", "token", "reader", "-n", namespace).stdout.strip()
        control_plane.kubectl("create", "serviceaccount", "nobody", "-n", namespace)
        nobody = control_plane.kubectl("create", "token", "nobody", "-n", namespace).stdout.strip()

        mine = control_plane.kubectl("get", "executions", "-n", namespace, "-o", "json",
                                     token=token)  # fmt: skip
        assert json.loads(mine.stdout)["items"] == []  # allowed: none ran there yet
        for args, who in (
            (("-n", other), token),
            (("-A",), token),
            (("-n", namespace), nobody),
        ):
            denied = control_plane.kubectl("get", "executions", *args, token=who, check=False)
            assert denied.returncode == 1
            assert "Forbidden" in denied.stderr or "forbidden" in denied.stderr, denied.stderr
            assert 'cannot list resource "executions" in API group "runs.horae.dev"' in (
                denied.stderr
            )
    finally:
        control_plane.kubectl("delete", "namespace", other, "--wait=false", check=False)

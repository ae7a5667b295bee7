"""The chart on a whole cluster of its own: hack/k8s-up.sh with its controllers (the
controller manager, the scheduler and kwok's two simulated nodes, where no container runs
but pods are bound, Running and Ready, Jobs complete, and garbage collection, the
ServiceAccount admission and the disruption controller work as on any cluster).

One release, in the order an operator of Horae meets it: `helm install --wait` through
its migration hook; the components' Deployments, ReplicaSets and pods; their
PodDisruptionBudgets as the disruption controller counts them; the default WorkerPool
scaled on its backlog into a Deployment of pods with the pool's termination grace; the
`helm test` hook (whose two checks also run here, against the real store and API); an
upgrade, after the CRDs are applied as the chart's README says, and a rollback; and an
uninstall that leaves only what the README lists.

kwok's pods run nothing: the operator and API whose work is asserted run here as
processes, as the chart's ServiceAccounts, against this cluster.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from base64 import b64decode
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from horae.broker import Names
from horae.models import JobSource, JobSpec
from horae.operator.workerpool import Pool, WorkerPoolSpec, termination_grace
from horae.store.new_jobs import NewJob
from tests.support.certs import verify
from tests.support.kube import (
    REPO,
    ControlPlane,
    free_port,
    service_account_kubeconfig,
    start_control_plane,
    stop_control_plane,
)
from tests.support.processes import HORAE, Processes
from tests.support.queues import backlog
from tests.support.store_rows import StoreRows
from tests.support.wait import until, until_serving

CHART = REPO / "charts" / "horae"
RELEASE, NS = "horae", "horae-system"
REPLICAS = {"operator": 2, "api": 2, "scheduler": 3, "aggregated-api": 2}
"""The chart's default replicas of each component."""
POOL = "default"
DOCUMENTED_LEASES = ("horae.dev/operator-leader", "horae.dev/maintenance",
                     "horae.dev/shard-lease", "horae.dev/scheduler-member")  # fmt: skip
"""The labels of the Leases the components take, which an uninstall leaves (README)."""


def run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip


def helm(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(plane.bin / "helm"), "--kubeconfig", str(plane.kubeconfig), *args],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


def previous_chart(base: Path) -> Path:
    """The chart as an earlier version was: its WorkerPool CRD without spec.tenants."""
    copy = base / "horae"
    shutil.copytree(CHART, copy)
    path = copy / "crds" / "workerpools.yaml"
    crd = yaml.safe_load(path.read_text())
    for version in crd["spec"]["versions"]:
        del version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["tenants"]
    path.write_text(yaml.safe_dump(crd))
    return copy


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = start_control_plane(tmp_path_factory.mktemp("cluster"), controllers=True)
    try:
        yield plane
    finally:
        stop_control_plane(plane)


@pytest.fixture(scope="module")
def release(cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The chart (as an earlier version of it) installed with its defaults, as its README
    says; what `helm install` printed."""
    cluster.kubectl("create", "namespace", NS)
    chart = previous_chart(tmp_path_factory.mktemp("previous"))
    installed = helm(cluster, "install", RELEASE, str(chart), "-n", NS, "--wait", "--timeout=120s")
    assert installed.returncode == 0, installed.stderr
    return installed.stdout


def items(plane: ControlPlane, kind: str, *args: str) -> list[dict[str, Any]]:
    return list(plane.get_json(kind, "-n", NS, *args)["items"])


def running_and_ready(pod: dict[str, Any]) -> bool:
    ready = [c for c in pod["status"].get("conditions", []) if c["type"] == "Ready"]
    return pod["status"].get("phase") == "Running" and [c["status"] for c in ready] == ["True"]


def owner(thing: dict[str, Any]) -> tuple[str, str]:
    (ref,) = thing["metadata"]["ownerReferences"]
    return ref["kind"], ref["uid"]


def hooks(plane: ControlPlane) -> dict[str, dict[str, Any]]:
    """The release's hooks by name, with when and how each last ran."""
    status = json.loads(helm(plane, "status", RELEASE, "-n", NS, "-o", "json").stdout)
    return {h["name"]: h for h in status["hooks"]}


def component_pods(plane: ControlPlane, component: str) -> list[dict[str, Any]]:
    return items(plane, "pods", "-l", f"app.kubernetes.io/component={component}")


def test_install_runs_the_migration_hook_first_then_waits_for_every_component(
    cluster: ControlPlane, release: str
) -> None:
    assert f"helm test {RELEASE} -n {NS}" in release  # NOTES.txt: what to do next
    ran = hooks(cluster)
    account, job = ran["horae-migrations"]["last_run"], ran["horae-migrate"]["last_run"]
    assert account["phase"] == job["phase"] == "Succeeded"
    assert account["completed_at"] <= job["started_at"]  # the Job's ServiceAccount first
    # Both went once they succeeded: nothing of the hooks is left in the namespace.
    left = cluster.kubectl("get", "job/horae-migrate", "serviceaccount/horae-migrations",
                           "-n", NS, "--ignore-not-found", "-o", "name").stdout  # fmt: skip
    assert left == ""
    for component, replicas in REPLICAS.items():
        deployment = cluster.get_json("deployment", f"horae-{component}", "-n", NS)
        assert deployment["status"]["readyReplicas"] == replicas, component
        uid = deployment["metadata"]["uid"]
        (replica_set,) = [
            rs for rs in items(cluster, "replicasets") if owner(rs) == ("Deployment", uid)
        ]
        pods = component_pods(cluster, component)
        assert len(pods) == replicas
        for pod in pods:
            assert running_and_ready(pod), pod["status"]
            assert owner(pod) == ("ReplicaSet", replica_set["metadata"]["uid"])
            assert pod["spec"]["nodeName"].startswith("kwok-node-")
            assert pod["spec"]["serviceAccountName"] == f"horae-{component}"


def serving_certificate(plane: ControlPlane) -> dict[str, str]:
    """The aggregated API's certificate as the chart made it at install (Secret
    horae-aggregated-api-tls), decoded."""
    data = plane.get_json("secret", "horae-aggregated-api-tls", "-n", NS)["data"]
    return {key: b64decode(value).decode() for key, value in data.items()}


def test_install_registers_the_aggregated_api_with_the_ca_of_its_certificate(
    cluster: ControlPlane, release: str, tmp_path: Path
) -> None:
    """The APIService trusts the CA that signed the certificate its Service's pods serve,
    for the name kube-apiserver checks (kwok's pods run nothing, so kube-apiserver never
    reaches them here: tests/e2e/test_aggregated_plane.py takes that path with a real
    server)."""
    api_service = cluster.get_json("apiservice", "v1alpha1.runs.horae.dev")["spec"]
    assert api_service["service"] == {"namespace": NS, "name": "horae-aggregated-api",
                                      "port": 443}  # fmt: skip
    certificate = serving_certificate(cluster)
    assert b64decode(api_service["caBundle"]).decode() == certificate["ca.crt"]
    verify(certificate["ca.crt"], certificate["tls.crt"],
           hostname=f"horae-aggregated-api.{NS}.svc", directory=tmp_path)  # fmt: skip


async def test_each_disruption_budget_counts_its_components_pods(
    cluster: ControlPlane, release: str
) -> None:
    async def counted(component: str) -> dict[str, Any] | None:
        status = cluster.get_json("pdb", f"horae-{component}", "-n", NS).get("status", {})
        return status if status.get("currentHealthy") == REPLICAS[component] else None

    for component, replicas in REPLICAS.items():
        status = await until(
            lambda c=component: counted(c), timeout=30, what=f"the {component} budget's count"
        )
        assert status["expectedPods"] == status["currentHealthy"] == replicas
        assert (status["desiredHealthy"], status["disruptionsAllowed"]) == (replicas - 1, 1)


def component_env(
    cluster: ControlPlane, base: Path, component: str, database_url: str
) -> dict[str, str]:
    """What a component runs with here: its own database role, and the chart's
    ServiceAccount of it in this cluster (its RBAC, never admin)."""
    kubeconfig = service_account_kubeconfig(cluster, NS, f"horae-{component}",
                                            base / f"{component}.kubeconfig")  # fmt: skip
    return {"KUBECONFIG": str(kubeconfig), "HORAE_DATABASE_URL": database_url}


@pytest.fixture
def processes(
    cluster: ControlPlane, tmp_path: Path, broker_url: str, broker_prefix: str,
    role_urls: dict[str, str],
) -> Iterator[Processes]:  # fmt: skip
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HORAE_")},
        "PATH": cluster.env["PATH"],
        "HORAE_BROKER_URL": broker_url,
        "HORAE_BROKER_PREFIX": broker_prefix,
        "HORAE_NAMESPACE": NS,
        "HORAE_LOG_LEVEL": "INFO",
    }
    commands = {c: component_env(cluster, tmp_path, c, role_urls[c]) for c in ("operator", "api")}
    procs = Processes(env, tmp_path, command_env=commands)
    yield procs
    procs.stop_all()
    print(procs.dump())  # shown by pytest only when the test failed


async def test_a_workerpool_scaled_on_its_backlog_runs_pods_with_its_grace_under_a_budget(
    cluster: ControlPlane, release: str, processes: Processes, broker_url: str,
    broker_prefix: str,
) -> None:  # fmt: skip
    processes.start("operator", "operator", env={"HORAE_AUTOSCALE_PERIOD_SECONDS": "0.5"})

    async def pods_ready(count: int) -> list[dict[str, Any]] | None:
        pods = items(cluster, "pods", "-l", f"horae.dev/workerpool={POOL}")
        ready = [p for p in pods if running_and_ready(p)]
        return ready if len(ready) == len(pods) == count else None

    await until(lambda: pods_ready(1), timeout=60, what="the pool's first worker pod")
    # 250 messages and 100 per replica (the chart's targetBacklogPerReplica): 3 workers.
    await backlog(broker_url, Names(broker_prefix).pool_queue(NS, POOL), 250)
    pods = await until(lambda: pods_ready(3), timeout=60, what="3 ready worker pods")

    pool = cluster.get_json("workerpool", POOL, "-n", NS)
    deployment = cluster.get_json("deployment", POOL, "-n", NS)
    assert owner(deployment) == ("WorkerPool", pool["metadata"]["uid"])
    replica_sets = {rs["metadata"]["uid"]: rs for rs in items(cluster, "replicasets")}
    spec = WorkerPoolSpec.model_validate(pool["spec"])
    grace = termination_grace(Pool(NS, POOL, pool["metadata"]["uid"], spec))
    assert grace == 25 + 15  # the chart's workerPool.shutdownGraceSeconds, stop and hand-back
    for pod in pods:
        kind, uid = owner(pod)
        assert kind == "ReplicaSet"
        assert owner(replica_sets[uid]) == ("Deployment", deployment["metadata"]["uid"])
        assert pod["spec"]["terminationGracePeriodSeconds"] == grace
        assert pod["spec"]["serviceAccountName"] == "horae-worker"

    async def shown() -> dict[str, Any] | None:
        status = cluster.get_json("workerpool", POOL, "-n", NS).get("status", {})
        return status if status.get("readyReplicas") == 3 else None

    status = await until(shown, timeout=30, what="the pool's status: 3 ready")
    assert (status["queueDepth"], status["desiredReplicas"]) == (250, 3)

    async def budget() -> dict[str, Any] | None:
        status = cluster.get_json("pdb", "horae-worker", "-n", NS).get("status", {})
        return status if status.get("expectedPods") == 3 else None

    counted = await until(budget, timeout=30, what="the workers' budget to count 3")
    assert (counted["currentHealthy"], counted["disruptionsAllowed"]) == (3, 1)


async def test_a_workerpools_pods_are_ready_before_a_spike_falls_due_and_go_after_it(
    cluster: ControlPlane, release: str, processes: Processes, stored: StoreRows
) -> None:
    lead, window = 6, 3
    processes.start("operator", "operator", env={
        "HORAE_AUTOSCALE_PERIOD_SECONDS": "0.5", "HORAE_SCALE_AHEAD_SECONDS": str(lead),
        "HORAE_SCALE_DOWN_STABILIZATION_SECONDS": str(window),
    })  # fmt: skip
    cluster.kubectl("create", "namespace", "reports")
    cluster.kubectl("apply", "-f", "-", input="""
apiVersion: horae.dev/v1alpha1
kind: WorkerPool
metadata: {name: hourly, namespace: reports}
spec: {image: registry.example/reports:1, tasks: reports.tasks, minReplicas: 1, maxReplicas: 6}
""")  # fmt: skip

    async def ready_pods() -> int:
        pods = cluster.get_json("pods", "-n", "reports", "-l", "horae.dev/workerpool=hourly")
        return sum(1 for p in pods["items"] if running_and_ready(p))

    async def ready(count: int) -> float | None:
        return time.time() if await ready_pods() == count else None

    await until(lambda: ready(1), timeout=60, what="the pool's first worker pod")

    # 400 one-offs of the pool's namespace, all due 12 s from now, as a top of the hour
    # brings them (the pool's target: 100 per replica). No scheduler runs here: they stay
    # pending, and the pool's queue empty.
    now = datetime.now(UTC)
    due = (now + timedelta(seconds=12)).replace(microsecond=0)
    spec = JobSpec(task="report", run_at=due)
    await stored.create(
        [NewJob(spec=spec, tenant="reports", source=JobSource.API) for _ in range(400)], now=now
    )
    up = await until(lambda: ready(4), timeout=30, interval=0.2, what="4 ready worker pods")
    # Ready before the due time, and not asked for sooner than the lead (and a period) needs
    assert 0 < due.timestamp() - up <= lead + 0.5 + 1, f"{due.timestamp() - up:.1f}s ahead"
    status = cluster.get_json("workerpool", "hourly", "-n", "reports")["status"]
    (scaling,) = [c for c in status["conditions"] if c["type"] == "Scaling"]
    assert (scaling["status"], scaling["reason"]) == ("True", "ScaleAhead")
    assert scaling["message"].startswith(
        f"400 executions due at {due:%H:%M:%S} UTC ask for 4 replicas: 4 asked {lead}s ahead"
    ), scaling["message"]
    assert status["queueDepth"] == 0

    # the spike passed: its pods are kept for the stabilization window, then let go
    gone = await until(lambda: ready(1), timeout=window + 30, interval=0.2, what="back to 1 pod")
    assert gone >= due.timestamp() + window, "scaled in before the stabilization window"
    cluster.kubectl("delete", "namespace", "reports", "--wait=false")


def crd_tenants(plane: ControlPlane) -> list[bool]:
    """Per version of the installed WorkerPool CRD, whether its spec has `tenants`."""
    crd = plane.get_json("crd", "workerpools.horae.dev")
    return [
        "tenants" in v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        for v in crd["spec"]["versions"]
    ]


async def test_an_upgrade_after_the_documented_crd_step_and_a_rollback(
    cluster: ControlPlane, release: str, tmp_path: Path
) -> None:
    assert not any(crd_tenants(cluster))  # the earlier version's CRD, as Helm installed it
    # Helm owns the fields it wrote at install: a plain server-side apply is refused...
    plain = cluster.kubectl("apply", "--server-side", "-f", str(CHART / "crds"), check=False)
    assert plain.returncode != 0 and 'conflict with "helm"' in plain.stderr, plain.stderr
    # ...and the README's step takes them over.
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds"))
    assert all(crd_tenants(cluster))

    before = hooks(cluster)["horae-migrate"]["last_run"]["started_at"]
    certificate = serving_certificate(cluster)
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"api": {"replicas": 3},
                                      "podAnnotations": {"example.com/rollout": "2"}}))  # fmt: skip
    upgraded = helm(cluster, "upgrade", RELEASE, str(CHART), "-n", NS, "-f", str(values),
                    "--wait", "--timeout=120s")  # fmt: skip
    assert upgraded.returncode == 0, upgraded.stderr
    ran = hooks(cluster)
    assert ran["horae-migrate"]["last_run"]["started_at"] > before  # migrated again, first
    assert ran["horae-migrate"]["last_run"]["phase"] == "Succeeded"
    # The chart found the certificate it made at install and kept it (no needless rotation).
    assert serving_certificate(cluster) == certificate

    async def api_pods(count: int, annotated: bool) -> bool:
        pods = component_pods(cluster, "api")
        marked = ["example.com/rollout" in p["metadata"].get("annotations", {}) for p in pods]
        return (
            len(pods) == count
            and all(map(running_and_ready, pods))
            and all(m == annotated for m in marked)
        )

    await until(lambda: api_pods(3, True), timeout=60, what="3 annotated API pods")

    rolled = helm(cluster, "rollback", RELEASE, "1", "-n", NS, "--wait", "--timeout=120s")
    assert rolled.returncode == 0, rolled.stderr
    await until(lambda: api_pods(2, False), timeout=60, what="2 API pods, as installed")
    history = json.loads(helm(cluster, "history", RELEASE, "-n", NS, "-o", "json").stdout)
    assert [(r["revision"], r["status"]) for r in history] == [
        (1, "superseded"), (2, "superseded"), (3, "deployed")]  # fmt: skip
    assert all(crd_tenants(cluster))  # a rollback leaves the CRDs as they are


async def test_helm_test_runs_a_hook_whose_checks_pass_against_the_real_store_and_api(
    cluster: ControlPlane, release: str, processes: Processes, role_urls: dict[str, str]
) -> None:
    tested = helm(cluster, "test", RELEASE, "-n", NS, "--hide-notes", "--timeout=60s")
    assert tested.returncode == 0, tested.stderr
    assert "Phase:          Succeeded" in tested.stdout, tested.stdout
    gone = cluster.kubectl("get", "pod", "horae-test", "-n", NS, "--ignore-not-found")
    assert gone.stdout == ""  # a hook that passed is deleted

    # kwok ran no container: its two checks run here, as the pod would run them.
    manifests = yaml.safe_load_all(helm(cluster, "get", "hooks", RELEASE, "-n", NS).stdout)
    (pod,) = [m for m in manifests if m and m["kind"] == "Pod"]
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    (url_from,) = [e["valueFrom"] for e in containers["store"]["env"]
                   if e["name"] == "HORAE_DATABASE_URL"]  # fmt: skip
    assert url_from["secretKeyRef"]["name"] == "horae-postgres-api"  # the API's role
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HORAE_")},
           "HORAE_DATABASE_URL": role_urls["api"]}  # fmt: skip
    store = await asyncio.to_thread(run, [HORAE, *containers["store"]["args"]], env)
    assert store.returncode == 0, store.stdout + store.stderr
    assert "store groups (catalog version" in store.stdout

    port = free_port()
    processes.start("api", "api", "--port", str(port))
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        await until_serving(http)
    check = containers["api"]
    (url,) = check["args"]
    assert url == "http://horae-api:8080/readyz"  # the Service, in the release's namespace
    python, *code = check["command"]
    assert python == "python"
    here = url.replace("horae-api:8080", f"127.0.0.1:{port}")
    api = await asyncio.to_thread(run, [sys.executable, *code, here], env)
    assert api.returncode == 0, api.stderr
    assert json.loads(api.stdout) == {"status": "ready"}


def documented_lease(thing: dict[str, Any]) -> bool:
    labels = thing["metadata"].get("labels", {})
    return thing["kind"] == "Lease" and any(label in labels for label in DOCUMENTED_LEASES)


def listed(plane: ControlPlane, *, namespaced: bool) -> list[dict[str, Any]]:
    """Every object of every listable kind: in the release namespace, or cluster-wide."""
    scope = f"--namespaced={str(namespaced).lower()}"
    kinds = plane.kubectl("api-resources", "--verbs=list", scope, "-o", "name").stdout.split()
    kinds = [k for k in kinds if k not in ("events", "events.events.k8s.io")]
    where = ["-n", NS] if namespaced else []
    return list(plane.get_json(",".join(kinds), *where)["items"])


async def test_uninstall_leaves_only_what_the_chart_readme_lists(
    cluster: ControlPlane, release: str
) -> None:
    uninstalled = helm(cluster, "uninstall", RELEASE, "-n", NS, "--wait", "--timeout=120s")
    assert uninstalled.returncode == 0, uninstalled.stderr

    async def collected() -> bool:  # the WorkerPool's Deployment and pods: its dependents
        return not items(cluster, "pods") and not items(cluster, "replicasets")

    await until(collected, timeout=60, what="garbage collection of the pool's pods")
    namespace_own = {("ServiceAccount", "default"), ("ConfigMap", "kube-root-ca.crt")}
    left = [
        (o["kind"], o["metadata"]["name"])
        for o in listed(cluster, namespaced=True)
        if (o["kind"], o["metadata"]["name"]) not in namespace_own and not documented_lease(o)
    ]
    assert left == []
    crds = {yaml.safe_load(p.read_text())["metadata"]["name"] for p in (CHART / "crds").iterdir()}
    cluster_wide = {
        (o["kind"], o["metadata"]["name"])
        for o in listed(cluster, namespaced=False)
        if (RELEASE in o["metadata"]["name"]
            or o["metadata"].get("labels", {}).get("app.kubernetes.io/instance") == RELEASE)
        and (o["kind"], o["metadata"]["name"]) != ("Namespace", NS)
        # The API server's own registration of the CRDs' group (served by itself).
        and not (o["kind"] == "APIService" and o["spec"].get("service") is None)
    }  # fmt: skip
    assert cluster_wide == {("CustomResourceDefinition", name) for name in crds}

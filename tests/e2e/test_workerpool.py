"""WorkerPools as Kubernetes users meet them: a Deployment of workers owned by the pool,
scaled on the pool's RabbitMQ queue depth, and settling back only after the
stabilization window. No kube-controller-manager runs here, so Deployments are
objects without pods: the assertions are on `spec.replicas` and the pool's status."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aio_pika

from horae.broker import Names
from tests.support.kube import ControlPlane
from tests.support.processes import Processes
from tests.support.queues import backlog
from tests.support.wait import until

WINDOW = 3.0
OPERATOR_ENV = {
    "HORAE_SCALE_DOWN_STABILIZATION_SECONDS": str(WINDOW),
    "HORAE_AUTOSCALE_PERIOD_SECONDS": "0.5",
}


def manifest(namespace: str, name: str, spec: str) -> str:
    return f"""
apiVersion: horae.dev/v1alpha1
kind: WorkerPool
metadata: {{name: {name}, namespace: {namespace}}}
spec:
{spec}
"""


def deployment(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    found = plane.kubectl("get", "deployment", name, "-n", namespace, "-o", "json",
                          check=False)  # fmt: skip
    return json.loads(found.stdout) if found.returncode == 0 else None


async def purge(broker_url: str, queue: str) -> None:
    connection = await aio_pika.connect(broker_url)
    try:
        channel = await connection.channel()
        declared = await channel.declare_queue(queue, passive=True)
        await declared.purge()
    finally:
        await connection.close()


def pool_status(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    return dict(plane.get_json("workerpool", name, "-n", namespace).get("status") or {})


async def test_a_workerpool_becomes_a_deployment_it_owns_and_keeps_in_step(
    control_plane: ControlPlane, namespace: str, processes: Processes
) -> None:
    processes.start("operator", "operator", env=OPERATOR_ENV)
    control_plane.kubectl("create", "serviceaccount", "shop-workers", "-n", namespace)
    control_plane.kubectl("label", "serviceaccount", "shop-workers", "-n", namespace,
                          "horae.dev/worker=true")  # fmt: skip
    control_plane.kubectl("apply", "-f", "-", input=manifest(namespace, "shop", """
  image: registry.example/shop-workers:1.0
  tasks: shop.tasks
  minReplicas: 2
  maxReplicas: 5
  concurrency: 4
  serviceAccountName: shop-workers
  resources: {requests: {cpu: 250m, memory: 256Mi}}
  env: [{name: SHOP_REGION, value: eu}]
"""))  # fmt: skip
    uid = control_plane.get_json("workerpool", "shop", "-n", namespace)["metadata"]["uid"]

    async def created() -> dict[str, Any] | None:
        return deployment(control_plane, namespace, "shop")

    dep = await until(created, timeout=30, what="the pool's Deployment")
    labels = {"horae.dev/workerpool": "shop"}
    assert dep["metadata"]["labels"] == labels
    (owner,) = dep["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "WorkerPool", "shop", uid, True,
    )  # fmt: skip
    assert dep["spec"]["selector"] == {"matchLabels": labels}
    pod = dep["spec"]["template"]
    assert pod["metadata"]["labels"] == labels
    assert pod["spec"]["serviceAccountName"] == "shop-workers"
    assert pod["spec"]["automountServiceAccountToken"] is False
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "registry.example/shop-workers:1.0"
    assert container["command"] == ["horae", "worker", "--tasks", "shop.tasks"]
    assert container["env"] == [
        {"name": "HORAE_POOL", "value": "shop"},
        {"name": "HORAE_POOL_NAMESPACE", "value": namespace},
        {"name": "HORAE_TENANTS", "value": namespace},
        {"name": "HORAE_CONCURRENCY", "value": "4"},
        {"name": "HORAE_METRICS_PORT", "value": "9100"},
        {"name": "SHOP_REGION", "value": "eu"},
    ]
    assert container["resources"] == {"requests": {"cpu": "250m", "memory": "256Mi"}}

    # starts at minReplicas, and the status says what the autoscaler saw
    async def settled() -> dict[str, Any] | None:
        status = pool_status(control_plane, namespace, "shop")
        return status if status.get("replicas") == 2 else None

    status = await until(settled, timeout=20, what="status.replicas 2")
    assert (status["queueDepth"], status["desiredReplicas"], status["readyReplicas"]) == (0, 2, 0)
    assert (deployment(control_plane, namespace, "shop") or {})["spec"]["replicas"] == 2

    # what others add to the Deployment survives a change of the pool; what the pool
    # drops is removed; replicas stay the autoscaler's
    control_plane.kubectl("annotate", "deployment", "shop", "-n", namespace,
                          "team.example/owner=shop")  # fmt: skip
    control_plane.kubectl("apply", "-f", "-", input=manifest(namespace, "shop", """
  image: registry.example/shop-workers:1.1
  tasks: shop.tasks
  minReplicas: 2
  maxReplicas: 5
"""))  # fmt: skip

    async def updated() -> dict[str, Any] | None:
        dep = deployment(control_plane, namespace, "shop") or {}
        containers = dep.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
        return dep if containers and containers[0]["image"].endswith(":1.1") else None

    dep = await until(updated, timeout=20, what="the new image in the Deployment")
    assert dep["metadata"]["annotations"]["team.example/owner"] == "shop"
    pod = dep["spec"]["template"]["spec"]
    assert pod["containers"][0]["env"] == [
        {"name": "HORAE_POOL", "value": "shop"},
        {"name": "HORAE_POOL_NAMESPACE", "value": namespace},
        {"name": "HORAE_TENANTS", "value": namespace},
        {"name": "HORAE_METRICS_PORT", "value": "9100"},
    ]
    assert "resources" not in pod["containers"][0] or not pod["containers"][0]["resources"]
    assert "serviceAccountName" not in pod and "serviceAccount" not in pod
    assert dep["spec"]["replicas"] == 2


async def test_a_pool_scales_out_on_its_backlog_and_back_after_the_window(
    control_plane: ControlPlane,
    namespace: str,
    processes: Processes,
    broker_url: str,
    broker_prefix: str,
) -> None:
    processes.start("operator", "operator", env=OPERATOR_ENV)
    control_plane.kubectl("apply", "-f", "-", input=manifest(namespace, "crunchers", """
  image: registry.example/shop-workers:1.0
  tasks: shop.tasks
  minReplicas: 1
  maxReplicas: 8
  targetBacklogPerReplica: 100
"""))  # fmt: skip

    async def replicas() -> int | None:
        dep = deployment(control_plane, namespace, "crunchers")
        return None if dep is None else int(dep["spec"].get("replicas", 0))

    async def at(n: int) -> bool:
        return await replicas() == n

    await until(lambda: at(1), timeout=30, what="the Deployment at minReplicas")

    queue = Names(broker_prefix).pool_queue(namespace, "crunchers")
    await backlog(broker_url, queue, 1000)

    async def scaled_out() -> dict[str, Any] | None:
        status = pool_status(control_plane, namespace, "crunchers")
        # The status may first be written while the publishes still arrive (949 of 1000
        # seen, already 8 replicas): wait for the whole backlog to be seen too.
        return status if (status.get("replicas"), status.get("queueDepth")) == (8, 1000) else None

    status = await until(scaled_out, timeout=20, what="8 replicas")
    assert (status["queueDepth"], status["desiredReplicas"]) == (1000, 8)
    assert status["lastScaleTime"]
    assert await replicas() == 8

    purged_at = time.monotonic()
    await purge(broker_url, queue)

    # the queue is empty: the status asks for 1 at once, the Deployment follows only
    # once that has held for the whole window
    held: list[dict[str, Any]] = []

    async def scaled_in() -> float | None:
        status = pool_status(control_plane, namespace, "crunchers")
        count = await replicas()
        if count == 1:
            return time.monotonic()
        assert count == 8, f"scaled to {count} replicas, not straight to the minimum"
        if status.get("desiredReplicas") == 1:
            held.append(status)
        return None

    scaled_at = await until(scaled_in, timeout=WINDOW + 15, interval=0.25, what="1 replica")
    assert scaled_at - purged_at >= WINDOW, "scaled in before the stabilization window"
    assert held, "never saw desiredReplicas 1 while the window held the replicas at 8"
    assert all(s["queueDepth"] == 0 and s["replicas"] == 8 for s in held)

    async def shown() -> dict[str, Any] | None:
        status = pool_status(control_plane, namespace, "crunchers")
        return status if status.get("replicas") == 1 else None

    status = await until(shown, timeout=10, what="status.replicas 1")
    assert (status["queueDepth"], status["desiredReplicas"]) == (0, 1)

    # deleted: the operator lets go of the Deployment (garbage collection, which does not
    # run here, removes it in a cluster), so a new backlog no longer scales it
    control_plane.kubectl("delete", "workerpool", "crunchers", "-n", namespace, "--wait=true")
    await backlog(broker_url, queue, 1000)
    await asyncio.sleep(2)  # four autoscaler periods: nothing may happen, so nothing to await
    assert await replicas() == 1


def events(plane: ControlPlane, namespace: str, name: str) -> list[tuple[str, str]]:
    found = plane.get_json("events", "-n", namespace,
                           "--field-selector", f"involvedObject.name={name}")  # fmt: skip
    return [(e["reason"], e["message"]) for e in found["items"]]


async def test_a_pool_cannot_borrow_an_unmarked_account_or_take_over_a_deployment(
    control_plane: ControlPlane, namespace: str, processes: Processes
) -> None:
    """A WorkerPool author could once run pods as any ServiceAccount of the namespace and
    take over any Deployment of the pool's name."""
    control_plane.kubectl("create", "serviceaccount", "deployer", "-n", namespace)
    control_plane.kubectl("create", "deployment", "web", "-n", namespace,
                          "--image=registry.example/web:1")  # fmt: skip
    before = deployment(control_plane, namespace, "web")
    assert before is not None
    processes.start("operator", "operator", env=OPERATOR_ENV)
    control_plane.kubectl("apply", "-f", "-", input=manifest(namespace, "borrow", """
  image: registry.example/w:1
  tasks: t
  serviceAccountName: deployer
  automountServiceAccountToken: true
"""))  # fmt: skip
    control_plane.kubectl("apply", "-f", "-", input=manifest(namespace, "web", """
  image: registry.example/w:1
  tasks: t
"""))  # fmt: skip

    async def refused() -> bool:
        reasons = {r for r, _ in events(control_plane, namespace, "borrow")}
        reasons |= {r for r, _ in events(control_plane, namespace, "web")}
        return {"ServiceAccountNotAllowed", "DeploymentNotOwned"} <= reasons

    await until(refused, timeout=30, what="both pools refused with an Event each")
    assert deployment(control_plane, namespace, "borrow") is None
    after = deployment(control_plane, namespace, "web")
    assert after is not None
    assert after["spec"]["template"] == before["spec"]["template"]
    assert "ownerReferences" not in after["metadata"]
    [message] = {m for r, m in events(control_plane, namespace, "borrow")
                 if r == "ServiceAccountNotAllowed"}  # fmt: skip
    assert "label it horae.dev/worker=true" in message

    # Whoever manages the namespace's ServiceAccounts marks it: the pool then runs as it.
    control_plane.kubectl("label", "serviceaccount", "deployer", "-n", namespace,
                          "horae.dev/worker=true")  # fmt: skip

    async def running() -> dict[str, Any] | None:
        return deployment(control_plane, namespace, "borrow")

    dep = await until(running, timeout=60, what="the pool's Deployment once allowed")
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "deployer"
    assert pod["automountServiceAccountToken"] is True


async def test_only_a_pool_in_horaes_namespace_may_serve_other_namespaces(
    control_plane: ControlPlane, namespace: str, processes: Processes
) -> None:
    # The test's namespace stands in for Horae's own (the operator's HORAE_NAMESPACE).
    processes.start("operator", "operator", env=OPERATOR_ENV)
    team = f"{namespace}-team"
    control_plane.kubectl("create", "namespace", team)
    pool = """
  image: registry.example/shared:1.0
  tasks: shared.tasks
  tenants: [team-a, team-b]
"""
    control_plane.kubectl("apply", "-f", "-", input=manifest(namespace, "shared", pool))
    control_plane.kubectl("apply", "-f", "-", input=manifest(team, "sneaky", pool))

    async def shared() -> dict[str, Any] | None:
        return deployment(control_plane, namespace, "shared")

    dep = await until(shared, timeout=30, what="the shared pool's Deployment")
    env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "HORAE_TENANTS", "value": "team-a,team-b"} in env

    async def refused() -> dict[str, Any] | None:
        conditions = pool_status(control_plane, team, "sneaky").get("conditions") or []
        return next((c for c in conditions if c["type"] == "Ready"), None)

    ready = await until(refused, timeout=30, what="the sneaky pool's Ready condition")
    assert (ready["status"], ready["reason"]) == ("False", "TenantsNotAllowed")
    assert "spec.tenants" in ready["message"]
    assert deployment(control_plane, team, "sneaky") is None

    # Nor may a pool choose its tenants through its env: refused at apply, naming the rule.
    sneaky_env = """
  image: registry.example/shared:1.0
  tasks: shared.tasks
  env: [{name: HORAE_TENANTS, value: team-a}]
"""
    applied = control_plane.kubectl(
        "apply", "-f", "-", input=manifest(team, "sneakier", sneaky_env), check=False
    )
    assert applied.returncode != 0
    assert "spec.env may not set HORAE_POOL, HORAE_POOL_NAMESPACE, HORAE_TENANTS" in applied.stderr


def pool_condition(plane: ControlPlane, namespace: str, name: str, kind: str) -> dict[str, Any]:
    conditions = pool_status(plane, namespace, name).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), {})


async def test_kubectl_scale_sets_an_external_pools_replicas_and_its_deployment_follows(
    control_plane: ControlPlane, namespace: str, processes: Processes
) -> None:
    """What an HPA or a KEDA ScaledObject does through the scale subresource, as a user
    does it by hand: the operator never changes the figure, its Deployment runs it."""
    processes.start("operator", "operator", env=OPERATOR_ENV)
    control_plane.kubectl("apply", "-f", "-", input=manifest(namespace, "reports", """
  image: registry.example/reports:1.0
  tasks: reports.tasks
  autoscaling: External
  minReplicas: 2
"""))  # fmt: skip

    async def filled_in() -> dict[str, Any] | None:
        pool = control_plane.get_json("workerpool", "reports", "-n", namespace)
        ready = pool_condition(control_plane, namespace, "reports", "Ready")
        scaling = pool_condition(control_plane, namespace, "reports", "Scaling")
        # Filling spec.replicas in is a new generation, which the operator observes too.
        current = pool.get("status", {}).get("observedGeneration") == pool["metadata"]["generation"]
        return pool if pool["spec"].get("replicas") == 2 and ready and scaling and current else None

    pool = await until(filled_in, timeout=30, what="spec.replicas filled in, and observed")
    status = pool["status"]
    assert status["selector"] == "horae.dev/workerpool=reports"
    assert pool["metadata"]["generation"] == 2  # the manifest's, then the filled-in figure's
    ready = pool_condition(control_plane, namespace, "reports", "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Deployed")
    scale = control_plane.get_json("workerpool", "reports", "-n", namespace,
                                   "--subresource=scale")  # fmt: skip
    assert (scale["kind"], scale["spec"]["replicas"]) == ("Scale", 2)
    assert scale["status"]["selector"] == "horae.dev/workerpool=reports"

    control_plane.kubectl("scale", "workerpool", "reports", "-n", namespace, "--replicas=4")

    async def followed() -> dict[str, Any] | None:
        dep = deployment(control_plane, namespace, "reports") or {}
        status = pool_status(control_plane, namespace, "reports")
        moved = dep.get("spec", {}).get("replicas") == 4 and status.get("replicas") == 4
        return status if moved else None

    status = await until(followed, timeout=20, what="the Deployment at 4 replicas")
    assert status["desiredReplicas"] == 4
    scaling = pool_condition(control_plane, namespace, "reports", "Scaling")
    assert (scaling["status"], scaling["reason"]) == ("False", "External")
    assert scaling["message"] == "4 replicas, as spec.replicas says"
    # a Deployment scaled behind the pool's back goes back to what the pool says
    control_plane.kubectl("scale", "deployment", "reports", "-n", namespace, "--replicas=9")

    async def restored() -> bool:
        dep = deployment(control_plane, namespace, "reports") or {}
        return bool(dep.get("spec", {}).get("replicas") == 4)

    await until(restored, timeout=20, what="the Deployment back at 4")
    assert control_plane.get_json("workerpool", "reports", "-n", namespace)["spec"]["replicas"] == 4

    table = control_plane.kubectl("get", "wp", "-n", namespace).stdout.splitlines()
    assert table[0].split() == [
        "NAME", "TASKS", "AUTOSCALING", "REPLICAS", "READY", "DESIRED", "QUEUE", "AGE"
    ]  # fmt: skip
    assert table[1].split()[:7] == ["reports", "reports.tasks", "External", "4", "0", "4", "0"]
    print("\n" + "\n".join(table))  # (the report quotes what a user sees)


async def test_a_builtin_pool_scaled_by_hand_keeps_the_figure_for_the_window_then_the_queue_decides(
    control_plane: ControlPlane, namespace: str, processes: Processes
) -> None:
    """The operator's autoscaler treats spec.replicas as an HPA does its target's: a figure
    above what the queue asks for lasts the stabilization window, then goes."""
    processes.start("operator", "operator", env=OPERATOR_ENV)
    control_plane.kubectl("apply", "-f", "-", input=manifest(namespace, "crunchers", """
  image: registry.example/shop-workers:1.0
  tasks: shop.tasks
  minReplicas: 1
  maxReplicas: 8
"""))  # fmt: skip

    async def replicas() -> tuple[int | None, int | None]:
        pool = control_plane.get_json("workerpool", "crunchers", "-n", namespace)
        dep = deployment(control_plane, namespace, "crunchers") or {}
        return pool["spec"].get("replicas"), dep.get("spec", {}).get("replicas")

    async def at(n: int) -> bool:
        return await replicas() == (n, n)

    await until(lambda: at(1), timeout=30, what="the pool and its Deployment at 1")
    scaled_at = time.monotonic()
    control_plane.kubectl("scale", "workerpool", "crunchers", "-n", namespace, "--replicas=5")
    await until(lambda: at(5), timeout=10, interval=0.25, what="the Deployment at 5")

    async def stabilizing() -> dict[str, Any] | None:
        scaling = pool_condition(control_plane, namespace, "crunchers", "Scaling")
        return scaling if scaling.get("reason") == "ScaleDownStabilizing" else None

    scaling = await until(stabilizing, timeout=10, interval=0.25, what="Scaling=True")
    assert scaling["status"] == "True"
    assert scaling["message"].startswith("the queue asks for 1 replicas; 5 kept until")
    await until(lambda: at(1), timeout=WINDOW + 15, interval=0.25, what="back at 1")
    assert time.monotonic() - scaled_at >= WINDOW, "scaled in before the stabilization window"
    settled = pool_condition(control_plane, namespace, "crunchers", "Scaling")
    assert settled["lastTransitionTime"] >= scaling["lastTransitionTime"]

    async def steady() -> dict[str, Any] | None:
        found = pool_condition(control_plane, namespace, "crunchers", "Scaling")
        return found if found.get("reason") == "DesiredReplicas" else None

    assert (await until(steady, timeout=10, what="Scaling=False"))["status"] == "False"

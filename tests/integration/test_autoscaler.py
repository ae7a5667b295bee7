"""The WorkerPool autoscaler against the real kube-apiserver and RabbitMQ."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from kubernetes.client import ApiClient

from horae.broker import Names
from horae.kube import CustomObjects, Deployments, ServiceAccounts, load_api_client
from horae.operator.workerpool import Autoscaler, Pool, WorkerPoolSpec
from horae.operator.workerpool.deployment import ensure_deployment
from tests.support.kube import ControlPlane
from tests.support.queues import backlog


def applied_pool(plane: ControlPlane, namespace: str, name: str, max_replicas: int) -> Pool:
    """A WorkerPool applied to the API server (its 1 to `max_replicas` replicas), as the
    operator's handlers hand it to the autoscaler."""
    spec = {"image": "registry.example/w:1", "tasks": "t", "minReplicas": 1,
            "maxReplicas": max_replicas}  # fmt: skip
    body = {
        "apiVersion": "horae.dev/v1alpha1",
        "kind": "WorkerPool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    plane.kubectl("apply", "-f", "-", input=json.dumps(body))
    uid = plane.get_json("workerpool", name, "-n", namespace)["metadata"]["uid"]
    return Pool(namespace=namespace, name=name, uid=uid, spec=WorkerPoolSpec.model_validate(spec))


def autoscaler_of(api: ApiClient, broker_url: str, broker_prefix: str) -> Autoscaler:
    return Autoscaler(
        deployments=Deployments(api),
        accounts=ServiceAccounts(api),
        objects=CustomObjects(api),
        broker_url=broker_url,
        names=Names(broker_prefix),
    )


async def test_a_deployment_the_pool_does_not_own_is_never_scaled_and_reported_once(
    control_plane: ControlPlane,
    namespace: str,
    broker_url: str,
    broker_prefix: str,
    component_kubeconfigs: dict[str, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A pool's Deployment replaced by one it does not own: each period logged an error with
    # its traceback, for as long as that Deployment stood.
    control_plane.kubectl(
        "create",
        "deployment",
        "web",
        "-n",
        namespace,
        "--image=registry.example/web:1",
        "--replicas=3",
    )
    pool = applied_pool(control_plane, namespace, "web", 2)
    api = load_api_client(str(component_kubeconfigs["operator"]))
    autoscaler = autoscaler_of(api, broker_url, broker_prefix)
    autoscaler.track(pool)
    try:
        with caplog.at_level(logging.INFO, logger="horae.operator.workerpool.autoscaler"):
            for _ in range(3):
                await autoscaler.tick()
    finally:
        await autoscaler.stop()
        api.close()

    dep = control_plane.get_json("deployment", "web", "-n", namespace)
    assert dep["spec"]["replicas"] == 3, "a pool at most 2 would have scaled it"
    logged = [
        (r.levelno, r.getMessage(), r.exc_info)
        for r in caplog.records
        if r.name == "horae.operator.workerpool.autoscaler"
    ]
    assert logged == [
        (
            logging.WARNING,
            f"WorkerPool {namespace}/web not scaled: Deployment web exists and is not this"
            " WorkerPool's: the operator never takes over a Deployment it does not own"
            " (rename the pool, or delete that Deployment)",
            None,
        )
    ]


async def test_a_pool_deleted_before_its_delete_event_arrives_is_never_scaled_again(
    control_plane: ControlPlane,
    namespace: str,
    broker_url: str,
    broker_prefix: str,
    component_kubeconfigs: dict[str, Path],
) -> None:
    # Its Deployment outlives it until garbage collection (which does not run here), and
    # the delete event reaches `forget` only after the round that looks at it began: the
    # e2e test saw a deleted pool scaled from 1 to 2 replicas by that round.
    pool = applied_pool(control_plane, namespace, "gone", 4)
    api = load_api_client(str(component_kubeconfigs["operator"]))
    autoscaler = autoscaler_of(api, broker_url, broker_prefix)
    try:
        await ensure_deployment(Deployments(api), ServiceAccounts(api), pool)
        autoscaler.track(pool)
        await backlog(broker_url, Names(broker_prefix).pool_queue(namespace, "gone"), 300)
        control_plane.kubectl("delete", "workerpool", "gone", "-n", namespace, "--wait=true")
        for _ in range(2):
            await autoscaler.tick()
    finally:
        await autoscaler.stop()
        api.close()
    dep = control_plane.get_json("deployment", "gone", "-n", namespace)
    assert dep["spec"]["replicas"] == 1, "300 ready messages scaled a deleted pool"

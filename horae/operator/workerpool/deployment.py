"""A WorkerPool's Deployment: the fields the operator owns, the privileges it checks
before applying them, and the apply itself."""

from __future__ import annotations

import math
from typing import Any

from horae.config import WorkerSettings, env_seconds
from horae.errors import ConfigError
from horae.kube import DeploymentReplicas, Deployments, ServiceAccounts
from horae.operator.workerpool.spec import POOL_LABEL, Pool
from horae.resources import GROUP, RESERVED_POOL_ENV, VERSION

CONTAINER = "worker"


METRICS_PORT = 9100
"""The workers' metrics and probe port (HORAE_METRICS_PORT), unless the pool's env sets one."""


def _metrics_port(pool: Pool) -> int:
    for entry in pool.spec.env:
        if entry.get("name") == "HORAE_METRICS_PORT" and str(entry.get("value", "")).isdigit():
            return int(entry["value"]) or METRICS_PORT
    return METRICS_PORT


def _env(pool: Pool) -> list[dict[str, Any]]:
    tenants = ",".join(pool.tenants or (pool.namespace,))
    reserved: list[dict[str, Any]] = [
        {"name": "HORAE_POOL", "value": pool.name},
        {"name": "HORAE_POOL_NAMESPACE", "value": pool.namespace},
        {"name": "HORAE_TENANTS", "value": tenants},
    ]
    ours: list[dict[str, Any]] = []
    if pool.spec.concurrency is not None:
        ours.append({"name": "HORAE_CONCURRENCY", "value": str(pool.spec.concurrency)})
    ours.append({"name": "HORAE_METRICS_PORT", "value": str(_metrics_port(pool))})
    # The CRD refuses these in `env`; a pool stored before that rule has them dropped.
    theirs = [e for e in pool.spec.env if e.get("name") not in RESERVED_POOL_ENV]
    names = {e.get("name") for e in theirs}
    # A name twice would be refused by the API server: the pool's own entries win.
    return reserved + [e for e in ours if e["name"] not in names] + theirs


HAND_BACK_MARGIN = 10
"""Seconds for the hand-back itself (one transaction) and the worker's exit."""


def termination_grace(pool: Pool) -> int:
    """The pod's terminationGracePeriodSeconds: the worker's shutdown grace (the pool's own
    HORAE_SHUTDOWN_GRACE_SECONDS when it sets one), its handlers' time to stop, and the
    hand-back, so that the kubelet's SIGKILL never comes before unfinished executions are
    handed back."""
    defaults = WorkerSettings()
    env = {e["name"]: e["value"] for e in pool.spec.env if "name" in e and "value" in e}
    try:
        grace = env_seconds(
            env, "HORAE_SHUTDOWN_GRACE_SECONDS", defaults.shutdown_grace.total_seconds()
        )
    except ConfigError:
        grace = defaults.shutdown_grace  # the worker refuses it at start-up and says why
    return math.ceil((grace + defaults.stop_wait).total_seconds()) + HAND_BACK_MARGIN


IMAGE_USER = 10001
"""The numeric user and group of Horae's images (Dockerfile); a pool's own should keep them."""

POD_SECURITY: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": IMAGE_USER,
    "runAsGroup": IMAGE_USER,
    "fsGroup": IMAGE_USER,
    "seccompProfile": {"type": "RuntimeDefault"},
}
"""As the chart's pods (charts/horae/templates/_helpers.tpl, horae.podSecurity)."""

CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}
"""As the chart's containers (horae.containerSecurity); /tmp is an emptyDir."""


def deployment_body(pool: Pool) -> dict[str, Any]:
    """The Deployment fields the operator owns. No replicas: they follow the pool's
    spec.replicas through the scale subresource (`Autoscaler`).
    Its pods run as the chart's do: non-root, read-only root filesystem, no capabilities."""
    labels = {POOL_LABEL: pool.name}
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": pool.spec.image,
        "command": ["horae", "worker", "--tasks", pool.spec.tasks],
        "env": _env(pool),
        "ports": [{"name": "metrics", "containerPort": _metrics_port(pool)}],
        # horae/probes.py: /healthz fails once the event loop has not turned for
        # HORAE_LIVENESS_STALL_SECONDS (a thread answers it, in time even while the loop is
        # busy), /readyz says whether the worker consumes. The chart's PodMonitor scrapes
        # the port by its name.
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "metrics"},
            "periodSeconds": 20,
            "timeoutSeconds": 5,
        },
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}, "timeoutSeconds": 5},
        "securityContext": CONTAINER_SECURITY,
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    if pool.spec.resources:
        container["resources"] = pool.spec.resources
    pod: dict[str, Any] = {
        "containers": [container],
        "securityContext": POD_SECURITY,
        "volumes": [{"name": "tmp", "emptyDir": {}}],
        "terminationGracePeriodSeconds": termination_grace(pool),
        # Workers need no Kubernetes API: no token in their pods unless the pool asks.
        "automountServiceAccountToken": pool.spec.automount_service_account_token,
    }
    spec = pool.spec
    if spec.priority_class_name:
        pod["priorityClassName"] = spec.priority_class_name
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod["tolerations"] = list(spec.tolerations)
    if spec.topology_spread_constraints:
        # As the chart's: a constraint without a selector spreads this pool's own pods.
        pod["topologySpreadConstraints"] = [
            {"labelSelector": {"matchLabels": labels}} | constraint
            for constraint in spec.topology_spread_constraints
        ]
    template: dict[str, Any] = {"labels": labels}
    if spec.pod_annotations:
        template["annotations"] = dict(spec.pod_annotations)
    if pool.spec.service_account_name:
        # Also the deprecated alias, which the API server would otherwise fill in, own
        # nobody's, and copy back into serviceAccountName once the pool drops it.
        pod["serviceAccountName"] = pod["serviceAccount"] = pool.spec.service_account_name
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": pool.name,
            "namespace": pool.namespace,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "WorkerPool",
                    "name": pool.name,
                    "uid": pool.uid,
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": template, "spec": pod},
        },
    }


WORKER_ACCOUNT_LABEL = f"{GROUP}/worker"
"""A ServiceAccount a WorkerPool may run its pods as carries this label set to "true"."""


class PoolRefused(Exception):
    """The operator will not run this pool as it stands (`reason` is the Event's)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def check_owned(deployment: DeploymentReplicas | None, pool: Pool) -> None:
    """PoolRefused when a Deployment of the pool's name exists that the pool does not own."""
    if deployment is not None and deployment.controller_uid != pool.uid:
        raise PoolRefused(
            "DeploymentNotOwned",
            f"Deployment {pool.name} exists and is not this WorkerPool's: the operator never"
            " takes over a Deployment it does not own (rename the pool, or delete that"
            " Deployment)",
        )


async def check_privileges(
    deployments: Deployments, accounts: ServiceAccounts, pool: Pool
) -> DeploymentReplicas | None:
    """Refuse what would let a WorkerPool author act beyond their rights: take over a
    Deployment the pool does not own, or run pods as a ServiceAccount of the namespace
    that nobody marked for workers (whoever may label ServiceAccounts there decides).
    Returns the pool's existing Deployment, if any."""
    existing = await deployments.get(pool.namespace, pool.name)
    check_owned(existing, pool)
    account = pool.spec.service_account_name
    if account:
        labels = await accounts.labels(pool.namespace, account)
        if labels is None:
            raise PoolRefused("ServiceAccountNotFound", f"ServiceAccount {account} not found")
        if labels.get(WORKER_ACCOUNT_LABEL) != "true":
            raise PoolRefused(
                "ServiceAccountNotAllowed",
                f"ServiceAccount {account} is not marked for workers: label it"
                f" {WORKER_ACCOUNT_LABEL}=true to let WorkerPools run as it",
            )
    return existing


def initial_replicas(pool: Pool, existing: DeploymentReplicas | None) -> int:
    """What a pool's spec.replicas is when unset: what its Deployment runs, and for a new
    pool its minReplicas."""
    if pool.spec.replicas is not None:
        return pool.spec.replicas
    return existing.replicas if existing is not None else pool.spec.min_replicas


async def ensure_deployment(
    deployments: Deployments, accounts: ServiceAccounts, pool: Pool
) -> DeploymentReplicas | None:
    """Apply the pool's Deployment once its privileges are checked (PoolRefused if not);
    a new one starts at the pool's spec.replicas (`initial_replicas`). Returns the
    Deployment as it was before (None: it is new)."""
    existing = await check_privileges(deployments, accounts, pool)
    await deployments.apply(pool.namespace, pool.name, deployment_body(pool))
    if existing is None:
        await deployments.scale(pool.namespace, pool.name, initial_replicas(pool, None))
    return existing

"""WorkerPools: each one reconciled into a Deployment of workers, scaled on its queue depth.

The handlers apply the Deployment (same name and namespace, owned by the WorkerPool, so
it is garbage-collected with it) and hand the pool to the `Autoscaler`. A pool's workers
serve the executions of its own namespace only (`HORAE_TENANTS`); a pool in Horae's own
namespace may serve the namespaces its `spec.tenants` lists (a cluster administrator's
shared pool), and a pool elsewhere that lists any is refused. Every period the
autoscaler reads the ready messages on the pool's queue (`<prefix>.pool.NS.NAME`), asks for
`ceil(ready / targetBacklogPerReplica)` replicas within [minReplicas, maxReplicas],
scales up at once and down only once the lower figure has held for the stabilization
window, and shows what it saw in the WorkerPool's status.

The operator writes only the Deployment fields it applies (server-side apply) and
`spec.replicas` (scale subresource): labels, annotations, sidecars or env vars that
others add survive. It never writes the WorkerPool's spec.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
import pydantic
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from horae import metrics
from horae.broker import Names, QueueDepths
from horae.config import WorkerSettings, env_seconds
from horae.errors import ConfigError
from horae.kube import CustomObjects, DeploymentReplicas, Deployments, ServiceAccounts
from horae.operator.conditions import condition, refuse
from horae.operator.tenancy import TenantsNotAllowed, served_tenants
from horae.resources import GROUP, RESERVED_POOL_ENV, VERSION

log = logging.getLogger(__name__)

POOL_LABEL = f"{GROUP}/workerpool"
CONTAINER = "worker"


class WorkerPoolSpec(BaseModel):
    """`spec` of a WorkerPool; the defaults are the CRD schema's."""

    model_config = ConfigDict(
        frozen=True, extra="ignore", alias_generator=to_camel, populate_by_name=True
    )

    image: str
    tasks: str
    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=10, ge=1)
    target_backlog_per_replica: int = Field(default=100, ge=1)
    concurrency: int | None = Field(default=None, ge=1)
    resources: dict[str, Any] | None = None
    env: list[dict[str, Any]] = Field(default_factory=list)
    service_account_name: str | None = None
    automount_service_account_token: bool = False
    tenants: list[str] | None = None


@dataclass(frozen=True)
class Pool:
    namespace: str
    name: str
    uid: str
    spec: WorkerPoolSpec
    tenants: tuple[str, ...] = ()
    """The tenants its workers serve (`tenancy.served_tenants`); empty: its own namespace."""


# -- the scaling rule (pure) -----------------------------------------------------


def desired_replicas(ready: int, *, minimum: int, maximum: int, target: int) -> int:
    """Replicas that `ready` messages ask for: one per `target`, within [minimum, maximum]."""
    return max(minimum, min(maximum, math.ceil(ready / target)))


@dataclass(frozen=True)
class ScaleDown:
    """A scale-down waiting out the stabilization window."""

    since: float
    """Clock seconds when desired first fell below the current replicas."""
    peak: int
    """Highest desired seen since then: what the pool is scaled down to."""


@dataclass(frozen=True)
class Decision:
    replicas: int
    waiting: ScaleDown | None


def decide(
    *, current: int, desired: int, maximum: int, waiting: ScaleDown | None, now: float,
    window: float,
) -> Decision:  # fmt: skip
    """Scale up (or down to a lowered maximum) at once; scale down only once desired has
    stayed below `current` for `window` seconds, and then to the highest figure it asked
    for meanwhile, so a short dip does not shed workers the next burst needs."""
    if current > maximum:
        return Decision(maximum, None)
    if desired >= current:
        return Decision(desired, None)
    if waiting is None:
        waiting = ScaleDown(since=now, peak=desired)
    else:
        waiting = ScaleDown(since=waiting.since, peak=max(waiting.peak, desired))
    if now - waiting.since >= window:
        return Decision(waiting.peak, None)
    return Decision(current, waiting)


# -- the Deployment ------------------------------------------------------------


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
        grace = env_seconds(env, "HORAE_SHUTDOWN_GRACE_SECONDS",
                            defaults.shutdown_grace.total_seconds())  # fmt: skip
    except ConfigError:
        grace = defaults.shutdown_grace  # the worker refuses it at start-up and says why
    return math.ceil((grace + defaults.stop_wait).total_seconds()) + HAND_BACK_MARGIN


IMAGE_USER = 10001
"""The numeric user and group of worker/Dockerfile (a pool's own image should keep them)."""

POD_SECURITY: dict[str, Any] = {
    "runAsNonRoot": True, "runAsUser": IMAGE_USER, "runAsGroup": IMAGE_USER,
    "fsGroup": IMAGE_USER, "seccompProfile": {"type": "RuntimeDefault"},
}  # fmt: skip
"""As the chart's pods (charts/horae/templates/_helpers.tpl, horae.podSecurity)."""

CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}  # fmt: skip
"""As the chart's containers (horae.containerSecurity); /tmp is an emptyDir."""


def deployment_body(pool: Pool) -> dict[str, Any]:
    """The Deployment fields the operator owns. No replicas: only the autoscaler sets them.
    Its pods run as the chart's do: non-root, read-only root filesystem, no capabilities."""
    labels = {POOL_LABEL: pool.name}
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": pool.spec.image,
        "command": ["horae", "worker", "--tasks", pool.spec.tasks],
        "env": _env(pool),
        "ports": [{"name": "metrics", "containerPort": _metrics_port(pool)}],
        # horae/probes.py: /healthz fails once the event loop stops turning, /readyz says
        # whether the worker consumes.
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 20},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}},
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
            "ownerReferences": [{
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkerPool", "name": pool.name,
                "uid": pool.uid, "controller": True, "blockOwnerDeletion": False,
            }],
        },
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }  # fmt: skip


WORKER_ACCOUNT_LABEL = f"{GROUP}/worker"
"""A ServiceAccount a WorkerPool may run its pods as carries this label set to "true"."""


class PoolRefused(Exception):
    """The operator will not run this pool as it stands (`reason` is the Event's)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _check_owned(deployment: DeploymentReplicas | None, pool: Pool) -> None:
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
    _check_owned(existing, pool)
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


async def ensure_deployment(
    deployments: Deployments, accounts: ServiceAccounts, pool: Pool
) -> None:
    """Apply the pool's Deployment once its privileges are checked (PoolRefused if not);
    a new one starts at minReplicas."""
    existing = await check_privileges(deployments, accounts, pool)
    await deployments.apply(pool.namespace, pool.name, deployment_body(pool))
    if existing is None:
        await deployments.scale(pool.namespace, pool.name, pool.spec.min_replicas)


# -- the autoscaler ------------------------------------------------------------


@dataclass
class _Tracked:
    pool: Pool
    waiting: ScaleDown | None = None
    last_scale_time: str | None = None
    shown: dict[str, Any] = field(default_factory=dict)
    refused: str | None = None
    """The reason of the refusal last logged, until the pool is scaled again."""


def _iso_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Autoscaler:
    """Scales every known WorkerPool's Deployment on its queue depth, every `period`."""

    def __init__(
        self,
        *,
        deployments: Deployments,
        accounts: ServiceAccounts,
        objects: CustomObjects,
        broker_url: str,
        names: Names,
        period: timedelta = timedelta(seconds=5),
        stabilization: timedelta = timedelta(seconds=300),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._deployments = deployments
        self._accounts = accounts
        self._objects = objects
        self._depths = QueueDepths(broker_url)
        self._names = names
        self._period = period.total_seconds()
        self._window = stabilization.total_seconds()
        self._clock = clock
        self._pools: dict[tuple[str, str], _Tracked] = {}
        self._wake = asyncio.Event()
        self._busy = asyncio.Lock()
        self._stopping = False

    def track(self, pool: Pool) -> None:
        """Scale `pool` from now on (or with its new spec); it is looked at right away."""
        key = (pool.namespace, pool.name)
        tracked = self._pools.get(key)
        if tracked is None or tracked.pool.uid != pool.uid:
            self._pools[key] = _Tracked(pool)
        else:
            tracked.pool = pool
        self._wake.set()

    def forget(self, namespace: str, name: str) -> None:
        self._pools.pop((namespace, name), None)

    async def run(self) -> None:
        """Scale every `period` (and whenever a pool is tracked) until `stop()`."""
        try:
            while True:
                self._wake.clear()
                async with self._busy:
                    if self._stopping:
                        return
                    await self.tick()
                try:
                    async with asyncio.timeout(self._period):  # no task, unlike wait_for
                        await self._wake.wait()
                except TimeoutError:
                    pass
        finally:
            await self._depths.close()

    async def stop(self) -> None:
        """End `run()` after the round in progress and close the broker connection.

        Called from kopf's cleanup: kopf waits for (then cancels) every task that appeared
        after it started, and the connection's reader is one."""
        async with self._busy:
            self._stopping = True
            self._wake.set()
            await self._depths.close()

    async def tick(self) -> None:
        """Look at every pool once, and at what waits for a pool in `<prefix>.held`."""
        try:
            metrics.held_messages.set(await self._depths.ready(self._names.held))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("could not read the depth of %s", self._names.held)
        for key, tracked in list(self._pools.items()):
            try:
                await self._scale(tracked)
                tracked.refused = None
            except asyncio.CancelledError:
                raise
            except PoolRefused as refused:
                # No fault of the operator's, and it lasts until someone removes that
                # Deployment or marks the account again: said once, not every period.
                if refused.reason != tracked.refused:
                    log.warning("WorkerPool %s/%s not scaled: %s", *key, refused)
                    tracked.refused = refused.reason
            except Exception:
                log.exception("could not autoscale WorkerPool %s/%s", *key)

    async def _scale(self, tracked: _Tracked) -> None:
        pool, spec = tracked.pool, tracked.pool.spec
        ready = await self._depths.ready(self._names.pool_queue(pool.namespace, pool.name))
        deployment = await self._deployments.get(pool.namespace, pool.name)
        if deployment is None:
            # Deleted behind our back (put it back), or with its WorkerPool (then forget it).
            gone = {"replicas": 0, "readyReplicas": 0}
            if await self._objects.patch_status("workerpools", pool.namespace, pool.name, gone):
                await ensure_deployment(self._deployments, self._accounts, pool)
            else:
                self.forget(pool.namespace, pool.name)
            return
        _check_owned(deployment, pool)
        desired = desired_replicas(
            ready,
            minimum=spec.min_replicas,
            maximum=spec.max_replicas,
            target=spec.target_backlog_per_replica,
        )
        decision = decide(
            current=deployment.replicas,
            desired=desired,
            maximum=spec.max_replicas,
            waiting=tracked.waiting,
            now=self._clock(),
            window=self._window,
        )
        tracked.waiting = decision.waiting
        if decision.replicas != deployment.replicas:
            if not await self._deployments.scale(pool.namespace, pool.name, decision.replicas):
                return
            tracked.last_scale_time = _iso_now()
            log.info("scaled WorkerPool %s/%s from %d to %d replicas (%d ready messages)",
                     pool.namespace, pool.name, deployment.replicas, decision.replicas,
                     ready)  # fmt: skip
        status = {
            "queueDepth": ready,
            "desiredReplicas": desired,
            "replicas": decision.replicas,
            "readyReplicas": deployment.ready_replicas,
            "lastScaleTime": tracked.last_scale_time,
        }
        if status != tracked.shown:
            present = await self._objects.patch_status(
                "workerpools", pool.namespace, pool.name, status
            )
            if not present:
                self.forget(pool.namespace, pool.name)
                return
            tracked.shown = status


# -- kopf handlers ---------------------------------------------------------------


REFUSED_RETRY_SECONDS = 30
"""How often a refused pool is checked again."""


def register(registry: kopf.OperatorRegistry) -> None:
    """Register the WorkerPool handlers on `registry`; they use `memo.deployments`
    (a `horae.kube.Deployments`), `memo.service_accounts`, `memo.events` and
    `memo.autoscaler` (an `Autoscaler`)."""

    @kopf.on.create(GROUP, VERSION, "workerpools", registry=registry)
    @kopf.on.update(GROUP, VERSION, "workerpools", field="spec", registry=registry)
    @kopf.on.resume(GROUP, VERSION, "workerpools", registry=registry)
    async def reconcile(
        spec: kopf.Spec,
        meta: kopf.Meta,
        uid: str,
        namespace: str | None,
        name: str,
        patch: kopf.Patch,
        memo: kopf.Memo,
        **_: Any,
    ) -> None:
        assert namespace is not None, "WorkerPool is namespaced"
        try:
            parsed = WorkerPoolSpec.model_validate(dict(spec))
        except pydantic.ValidationError as exc:
            raise kopf.PermanentError(f"invalid WorkerPool spec: {exc}") from exc
        try:
            tenants = served_tenants(namespace, parsed.tenants, install_namespace=memo.namespace)
            pool = Pool(namespace=namespace, name=name, uid=uid, spec=parsed, tenants=tenants)
            await ensure_deployment(memo.deployments, memo.service_accounts, pool)
        except TenantsNotAllowed as exc:
            # Nothing is applied: an existing Deployment keeps serving this namespace only.
            # Only a new spec can settle it.
            await refuse(
                memo.events,
                patch,
                meta,
                kind="WorkerPool",
                reason="TenantsNotAllowed",
                message=str(exc),
            )
            raise kopf.PermanentError(str(exc)) from exc
        except PoolRefused as exc:
            # Retried: labelling the ServiceAccount or removing the Deployment settles it.
            await refuse(
                memo.events, patch, meta, kind="WorkerPool", reason=exc.reason, message=str(exc)
            )
            raise kopf.TemporaryError(str(exc), delay=REFUSED_RETRY_SECONDS) from None
        patch.status["conditions"] = [
            condition("Ready", True, "Deployed", f"serves {', '.join(tenants)}")
        ]
        memo.autoscaler.track(pool)

    @kopf.on.cleanup(registry=registry)
    async def stop_autoscaler(memo: kopf.Memo, **_: Any) -> None:
        await memo.autoscaler.stop()

    # No finalizer (a delete handler would add one): there is nothing to clean up, as the
    # Deployment goes with its owner, and a WorkerPool never waits for the operator to go.
    @kopf.on.event(GROUP, VERSION, "workerpools", when=_deleted, registry=registry)
    def forget(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
        if namespace is not None:
            memo.autoscaler.forget(namespace, name)


def _deleted(event: kopf.RawEvent, **_: Any) -> bool:
    return bool(event["type"] == "DELETED")

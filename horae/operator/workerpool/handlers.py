"""The kopf handlers of WorkerPools: reconcile into a Deployment, fill in spec.replicas when
unset, then hand the pool to the autoscaler."""

from __future__ import annotations

from typing import Any

import kopf
import pydantic

from horae.errors import ObjectChanged
from horae.operator.conditions import Condition, generation_of
from horae.operator.measuring import measured
from horae.operator.reporting import refuse
from horae.operator.tenancy import TenantsNotAllowed, served_tenants
from horae.operator.workerpool.deployment import PoolRefused, ensure_deployment, initial_replicas
from horae.operator.workerpool.spec import Pool, WorkerPoolSpec
from horae.resources import GROUP, VERSION

REFUSED_RETRY_SECONDS = 30
"""How often a refused pool is checked again."""


def register(registry: kopf.OperatorRegistry) -> None:
    """Register the WorkerPool handlers on `registry`; they use `memo.deployments`
    (a `horae.kube.Deployments`), `memo.service_accounts`, `memo.events`, `memo.objects`,
    `memo.pool_status` (a `StatusWriter`) and `memo.autoscaler` (an `Autoscaler`)."""

    @kopf.on.create(GROUP, VERSION, "workerpools", registry=registry)
    @kopf.on.update(GROUP, VERSION, "workerpools", field="spec", registry=registry)
    @kopf.on.resume(GROUP, VERSION, "workerpools", registry=registry)
    @measured("WorkerPool")
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
        # A closure (not `_reconcile` itself): kopf keys a handler's progress by its
        # qualified name, and this one's is the name stored in existing annotations.
        await _reconcile(spec, meta, uid, namespace, name, patch, memo)

    @kopf.on.cleanup(registry=registry)
    async def stop_autoscaler(memo: kopf.Memo, **_: Any) -> None:
        await memo.autoscaler.stop()

    # No finalizer (a delete handler would add one): there is nothing to clean up, as the
    # Deployment goes with its owner, and a WorkerPool never waits for the operator to go.
    @kopf.on.event(GROUP, VERSION, "workerpools", when=_deleted, registry=registry)
    def forget(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
        if namespace is not None:
            memo.autoscaler.forget(namespace, name)


async def _reconcile(
    spec: kopf.Spec,
    meta: kopf.Meta,
    uid: str,
    namespace: str | None,
    name: str,
    patch: kopf.Patch,
    memo: kopf.Memo,
) -> None:
    """Apply the pool's Deployment and autoscale it, or refuse it (an Event, a condition)."""
    assert namespace is not None, "WorkerPool is namespaced"
    try:
        parsed = WorkerPoolSpec.model_validate(dict(spec))
    except pydantic.ValidationError as exc:
        raise kopf.PermanentError(f"invalid WorkerPool spec: {exc}") from exc
    try:
        tenants = served_tenants(namespace, parsed.tenants, install_namespace=memo.namespace)
        pool = Pool(namespace=namespace, name=name, uid=uid, spec=parsed, tenants=tenants)
        existing = await ensure_deployment(memo.deployments, memo.service_accounts, pool)
    except TenantsNotAllowed as exc:
        # Nothing is applied: an existing Deployment keeps serving this namespace only.
        # Only a new spec can settle it.
        await refuse(
            memo.events,
            memo.pool_status,
            meta,
            kind="WorkerPool",
            reason="TenantsNotAllowed",
            message=str(exc),
        )
        raise kopf.PermanentError(str(exc)) from exc
    except PoolRefused as exc:
        # Retried: labelling the ServiceAccount or removing the Deployment settles it.
        await refuse(
            memo.events,
            memo.pool_status,
            meta,
            kind="WorkerPool",
            reason=exc.reason,
            message=str(exc),
        )
        raise kopf.TemporaryError(str(exc), delay=REFUSED_RETRY_SECONDS) from None
    if parsed.replicas is None:
        # The scale subresource (kubectl scale, an HPA, KEDA) needs a figure to read.
        replicas = initial_replicas(pool, existing)
        patch.spec["replicas"] = replicas
        pool = pool.with_replicas(replicas)
    memo.autoscaler.track(pool)
    try:
        await memo.pool_status.write(
            namespace,
            name,
            uid,
            {"selector": pool.selector},
            [Condition("Ready", True, "Deployed", f"serves {', '.join(tenants)}")],
            generation=generation_of(meta),
        )
    except ObjectChanged as exc:  # written over and over meanwhile: again soon
        raise kopf.TemporaryError(str(exc), delay=1) from exc


def _deleted(event: kopf.RawEvent, **_: Any) -> bool:
    return bool(event["type"] == "DELETED")

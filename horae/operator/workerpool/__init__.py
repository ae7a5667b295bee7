"""WorkerPools: each one reconciled into a Deployment of workers that runs the pool's
`spec.replicas`, set by the operator's autoscaler or by whoever scales the pool.

The handlers apply the Deployment (same name and namespace, owned by the WorkerPool, so
it is garbage-collected with it) and hand the pool to the `Autoscaler`. A pool's workers
serve the executions of its own namespace only (`HORAE_TENANTS`); a pool in Horae's own
namespace may serve the namespaces its `spec.tenants` lists (a cluster administrator's
shared pool), and a pool elsewhere that lists any is refused.

Replicas have one path: the Deployment always gets the pool's `spec.replicas` (the scale
subresource's figure, which `kubectl scale workerpool`, an HPA or a KEDA ScaledObject set).
Who sets it is `spec.autoscaling`:

- `Builtin` (the default): the autoscaler, as an HPA would. Every period it reads the
  ready messages on the pool's queue (`<prefix>.pool.NS.NAME`), asks for
  `ceil(ready / targetBacklogPerReplica)` replicas within [minReplicas, maxReplicas], and
  writes that to spec.replicas at once when it is more than spec.replicas says, and only
  once a lower figure has held for the stabilization window otherwise (so a figure set by
  hand lasts that long when it is higher, and not at all when lower).
  It also asks, ahead of time, for the replicas the executions about to fall due will
  need (`ahead`, `scaling.wanted`): for the largest 10 s bin of the pool's tenants due
  within the lead (a pod's start-up time, HORAE_SCALE_AHEAD_SECONDS) and one period.
- `External`: someone else; the operator only follows.

A pool without spec.replicas gets it from the operator (what its Deployment runs, or
minReplicas), so the scale subresource always has a figure to show. The WorkerPool's status
shows what the autoscaler saw (queueDepth, desiredReplicas), the Deployment's replicas
and ready pods, the pods' selector, and the conditions Ready and Scaling.

The operator writes only the Deployment fields it applies (server-side apply) and
`spec.replicas` (scale subresource): labels, annotations, sidecars or env vars that
others add survive. Of the WorkerPool's spec it writes only `replicas`: when unset, and
under `Builtin` autoscaling.
"""

from horae.operator.workerpool.autoscaler import Autoscaler
from horae.operator.workerpool.deployment import (
    IMAGE_USER,
    PoolRefused,
    check_privileges,
    deployment_body,
    ensure_deployment,
    termination_grace,
)
from horae.operator.workerpool.handlers import register
from horae.operator.workerpool.scaling import (
    Decision,
    ScaleDown,
    Spike,
    Wanted,
    decide,
    desired_replicas,
    wanted,
)
from horae.operator.workerpool.spec import POOL_LABEL, Pool, WorkerPoolSpec

__all__ = [
    "IMAGE_USER",
    "POOL_LABEL",
    "Autoscaler",
    "Decision",
    "Pool",
    "PoolRefused",
    "ScaleDown",
    "Spike",
    "Wanted",
    "WorkerPoolSpec",
    "check_privileges",
    "decide",
    "deployment_body",
    "desired_replicas",
    "ensure_deployment",
    "register",
    "termination_grace",
    "wanted",
]

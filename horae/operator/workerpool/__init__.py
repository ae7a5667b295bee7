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

from horae.operator.workerpool.autoscaler import Autoscaler
from horae.operator.workerpool.deployment import (
    IMAGE_USER,
    POOL_LABEL,
    PoolRefused,
    check_privileges,
    deployment_body,
    ensure_deployment,
    termination_grace,
)
from horae.operator.workerpool.handlers import register
from horae.operator.workerpool.scaling import Decision, ScaleDown, decide, desired_replicas
from horae.operator.workerpool.spec import Pool, WorkerPoolSpec

__all__ = [
    "IMAGE_USER",
    "POOL_LABEL",
    "Autoscaler",
    "Decision",
    "Pool",
    "PoolRefused",
    "ScaleDown",
    "WorkerPoolSpec",
    "check_privileges",
    "decide",
    "deployment_body",
    "desired_replicas",
    "ensure_deployment",
    "register",
    "termination_grace",
]

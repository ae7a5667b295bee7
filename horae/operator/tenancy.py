"""Which tenants a WorkerPool's workers serve: the rule a cluster administrator relies on.

A pool serves the executions of its own namespace only. A pool in Horae's own namespace
(the operator's `HORAE_NAMESPACE`, where only cluster administrators create resources) may
serve the namespaces its `spec.tenants` lists: a platform team's shared pool. A pool
elsewhere that lists any is refused. The answer reaches the workers as `HORAE_TENANTS`,
and their claims refuse any execution of another tenant.
"""

from __future__ import annotations

from collections.abc import Sequence

from horae.errors import HoraeError


class TenantsNotAllowed(HoraeError):
    """A pool outside Horae's namespace lists `spec.tenants`."""


def served_tenants(
    namespace: str, tenants: Sequence[str] | None, *, install_namespace: str
) -> tuple[str, ...]:
    """The tenants a pool of `namespace` serves: its own namespace, or, for a pool in Horae's
    own namespace only, the namespaces its `spec.tenants` lists. Whoever may create
    WorkerPools in Horae's namespace is a cluster administrator; a namespace user who lists
    another team's namespace elsewhere is refused rather than quietly narrowed."""
    if tenants is None:
        return (namespace,)
    if namespace != install_namespace:
        raise TenantsNotAllowed(
            f"spec.tenants: only a WorkerPool in Horae's namespace ({install_namespace!r}) may "
            f"serve other namespaces; a pool in {namespace!r} serves {namespace!r} only: "
            f"remove spec.tenants"
        )
    return tuple(sorted(set(tenants)))

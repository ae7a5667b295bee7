"""Status conditions of the operator's resources, and refusals: a resource the operator
will not act on as it stands gets `Ready=False` naming the reason, and a Warning Event of
that reason (what `kubectl describe` shows)."""

from __future__ import annotations

import kopf

from horae.clock import utc_now
from horae.domain.instants import rfc3339
from horae.kube import Events


def condition(kind: str, ok: bool, reason: str, message: str = "") -> dict[str, str]:
    """A status condition of type `kind`, its transition dated now."""
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": rfc3339(utc_now()),
    }


async def refuse(
    events: Events, patch: kopf.Patch, meta: kopf.Meta, *, kind: str, reason: str, message: str
) -> None:
    """Report why the resource (`kind`, its `meta`) is refused: its only condition becomes
    `Ready=False` in the status kopf patches, and a Warning Event says the same."""
    assert meta.namespace is not None, f"{kind} is namespaced"
    patch.status["conditions"] = [condition("Ready", False, reason, message)]
    await events.emit(
        kind=kind,
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        reason=reason,
        message=message,
    )

"""How the operator reports on its resources: `StatusWriter`, which writes a resource's
status with its conditions merged into those the resource has, and `refuse`: a resource
the operator will not act on as it stands gets `Ready=False` naming the reason, and a
Warning Event of that reason (what `kubectl describe` shows).

Every status write that sets conditions goes through a `StatusWriter` (kopf's handlers, the
store's changes, the resync pass, the autoscaler), so no writer's conditions are lost to
another's.

A condition's `lastTransitionTime` moves only when its status changes (`merged`), so the
writer must merge into what the resource holds now, not into what it held when last read:
each write names the resourceVersion it merged into, and one that finds the resource changed
since (a kopf handler wrote meanwhile) reads it again and merges again. What it wrote last
is kept (the version and the status's conditions, not the object), so a job's next write
needs no read unless someone else wrote in between.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from horae.clock import utc_now
from horae.errors import ObjectChanged
from horae.kube import CustomObjects, Events
from horae.operator.conditions import Condition, generation_of, merged

log = logging.getLogger(__name__)

ATTEMPTS = 3
"""Reads and writes of one status before giving up (each conflict is another writer's
write: a few in a row would mean a storm, and the next store change writes again)."""


@dataclass(frozen=True, slots=True)
class _Seen:
    uid: str
    resource_version: str
    status: dict[str, Any]
    """The status's `conditions` and `observedGeneration`, as written."""


class StatusWriter:
    """Versioned status writes of one kind of resource (`plural`) that merge conditions."""

    def __init__(self, objects: CustomObjects, plural: str) -> None:
        self._objects = objects
        self._plural = plural
        self._seen: dict[tuple[str, str], _Seen] = {}

    async def write(
        self,
        namespace: str,
        name: str,
        uid: str,
        fields: dict[str, Any],
        conditions: Sequence[Condition],
        *,
        generation: int | None = None,
    ) -> bool:
        """Set `fields` and `conditions` in the status of the resource `namespace/name`
        whose uid is `uid`; False when it is gone (or is a namesake, another uid). Each
        condition's `observedGeneration` is `generation`, else the status's own
        `observedGeneration` (the spec its handler last acted on). Raises `ObjectChanged`
        when the resource changed under every one of `ATTEMPTS` writes: nothing was
        written, and the caller writes again later (a status believed written would stay
        stale until the next change)."""
        key = (namespace, name)
        for _ in range(ATTEMPTS):
            seen = self._seen.get(key) or await self._read(namespace, name)
            if seen is None or seen.uid != uid:
                self._seen.pop(key, None)
                return False
            observed = (
                generation if generation is not None else seen.status.get("observedGeneration")
            )
            status = fields | {
                "conditions": merged(
                    seen.status.get("conditions"), conditions, now=utc_now(), generation=observed
                )
            }
            if generation is not None:
                status["observedGeneration"] = generation
            try:
                patched = await self._objects.patch_status_seen(
                    self._plural, namespace, name, status, resource_version=seen.resource_version
                )
            except ObjectChanged:
                self._seen.pop(key, None)
                continue
            if patched is None:
                self._seen.pop(key, None)
                return False
            self._seen[key] = _seen(patched)
            return True
        raise ObjectChanged(
            f"status of {self._plural} {namespace}/{name} changed {ATTEMPTS} times while written"
        )

    def forget(self, namespace: str, name: str) -> None:
        self._seen.pop((namespace, name), None)

    async def _read(self, namespace: str, name: str) -> _Seen | None:
        found = await self._objects.get(self._plural, namespace, name)
        return None if found is None else _seen(found)


def _seen(obj: dict[str, Any]) -> _Seen:
    status = obj.get("status") or {}
    kept = {k: status[k] for k in ("conditions", "observedGeneration") if k in status}
    meta = obj["metadata"]
    return _Seen(uid=meta["uid"], resource_version=meta["resourceVersion"], status=kept)


async def refuse(
    events: Events,
    writer: StatusWriter,
    meta: Mapping[str, Any],
    *,
    kind: str,
    reason: str,
    message: str,
) -> None:
    """Report why the resource (`kind`, its `meta`) is refused: its `Ready` condition
    becomes False for `reason` (its other conditions stay), its spec's generation is marked
    observed, and a Warning Event says the same."""
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    await writer.write(
        namespace,
        name,
        uid,
        {},
        [Condition("Ready", False, reason, message)],
        generation=generation_of(meta),
    )
    await events.emit(
        kind=kind, namespace=namespace, name=name, uid=uid, reason=reason, message=message
    )

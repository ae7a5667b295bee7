"""Status conditions of the operator's resources, as metav1.Condition (pure: the caller
passes `now`; `reporting` writes them).

`merged` is the rule every writer of conditions applies: a condition's
`lastTransitionTime` moves only when its status changes, so "Ready since" means what it
says however often the status is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from horae.domain.instants import rfc3339


@dataclass(frozen=True)
class Condition:
    """One condition as its writer decides it; `merged` dates it."""

    type: str
    status: bool
    reason: str
    """One CamelCase word (metav1.Condition's pattern)."""
    message: str = ""


def merged(
    existing: Sequence[Mapping[str, Any]] | None,
    wanted: Iterable[Condition],
    *,
    now: datetime,
    generation: int | None,
) -> list[dict[str, Any]]:
    """The conditions once `wanted` are set on `existing`: each wanted one keeps the
    `lastTransitionTime` of the existing condition of its type when its status is the same,
    and is dated `now` otherwise; each carries `generation` as its `observedGeneration`
    (when known). Existing conditions of other types are kept as they are (another writer's,
    or true still). Existing types keep their place; new ones come after, in `wanted`'s
    order."""
    by_type = {str(c.get("type")): dict(c) for c in existing or () if c.get("type")}
    order = list(by_type)
    for condition in wanted:
        status = "True" if condition.status else "False"
        before = by_type.get(condition.type)
        since = before.get("lastTransitionTime") if before else None
        written: dict[str, Any] = {
            "type": condition.type,
            "status": status,
            "reason": condition.reason,
            "message": condition.message,
            "lastTransitionTime": since
            if before is not None and before.get("status") == status and since
            else rfc3339(now),
        }
        if generation is not None:
            written["observedGeneration"] = generation
        if condition.type not in by_type:
            order.append(condition.type)
        by_type[condition.type] = written
    return [by_type[t] for t in order]


def generation_of(meta: Mapping[str, Any]) -> int | None:
    """A resource's `metadata.generation`, when it has one."""
    generation = meta.get("generation")
    return generation if isinstance(generation, int) else None

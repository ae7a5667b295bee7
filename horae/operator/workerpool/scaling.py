"""The scaling rule (pure): how many replicas a queue depth asks for, and when to follow."""

from __future__ import annotations

import math
from dataclasses import dataclass


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
    *,
    current: int,
    desired: int,
    maximum: int,
    waiting: ScaleDown | None,
    now: float,
    window: float,
) -> Decision:
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

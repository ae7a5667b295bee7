"""The scaling rule (pure): how many replicas a queue depth and the executions about to
fall due ask for (`desired_replicas`, `wanted`), and when to follow (`decide`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta


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


@dataclass(frozen=True)
class Spike:
    """`count` executions of a pool due from `first` to `last` (one bin of due time)."""

    first: datetime
    last: datetime
    count: int


@dataclass(frozen=True)
class Wanted:
    """The replicas a pool asks for (`replicas`, within [minReplicas, maxReplicas]) and why:
    what its queue asks for, and what the executions about to fall due ask for."""

    replicas: int
    queue: int
    """ceil(ready messages / target), unclamped."""
    ahead: int
    """ceil(spike.count / target) for the spike that asks for most, unclamped; 0: none."""
    spike: Spike | None
    """The spike within the lead (and one period) that asks for most, if any."""


def wanted(
    *,
    ready: int,
    due: Sequence[Spike],
    now: datetime,
    lead: timedelta,
    period: timedelta,
    minimum: int,
    maximum: int,
    target: int,
) -> Wanted:
    """The replicas to ask for now: as many as the queue's `ready` messages ask for (one per
    `target`), and as many as the largest spike of `due` that falls due before a pod asked
    for at the next round would be Ready (`lead`, a pod's start-up time, plus one `period`)
    asks for, one per `target` of its executions; within [minimum, maximum].

    A spike counts from then until its last execution is due (by then its executions are
    in the queue, which asks for them); one further ahead is left to a later round, so
    replicas are not held longer than the start-up time needs."""
    queue = math.ceil(ready / target)
    horizon = now + lead + period
    spike = max(
        (s for s in due if s.last >= now and s.first < horizon),
        key=lambda s: (s.count, -s.first.timestamp()),
        default=None,
    )
    ahead = math.ceil(spike.count / target) if spike is not None else 0
    replicas = max(
        desired_replicas(ready, minimum=minimum, maximum=maximum, target=target),
        min(maximum, ahead),
    )
    return Wanted(replicas, queue, ahead, spike)

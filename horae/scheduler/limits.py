"""Tenant limits at dispatch: the executions of a tenant that already runs its
`max_running` stay in the scheduler's heap, unpublished, instead of going to the queue
only for a worker's claim to put them back (which, with a backlog, made every held
execution go round the queue, the claim and the preload once a second, loading the
shared queue and the database for every other tenant).

How long they wait grows per tenant while it has no free slot (`FIRST_WAIT` doubling
up to `LONGEST_WAIT`), so a saturated tenant costs one count of its running executions
per `LONGEST_WAIT`, not a message per execution. The claim's check stays the rule
(replicas may each see the same free slot): this only keeps work off the queue that
the claim would refuse.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from horae.store import dispatch as store
from horae.store.dispatch import Due

if TYPE_CHECKING:
    from horae.store.db import Conn

LIMITS_TTL = 1.0
"""Seconds a tenant's `max_running` (its allowance in this group) is remembered: a changed
limit applies this late (the rebalancer moves allowances about every second)."""
FIRST_WAIT = timedelta(milliseconds=250)
LONGEST_WAIT = timedelta(seconds=1)


def late(d: Due, now: datetime) -> bool:
    """Past its starting deadline: the dispatch round skips it, whatever its tenant runs."""
    deadline = d.starting_deadline_seconds
    return deadline is not None and (now - d.due_at).total_seconds() > deadline


def split(dues: Sequence[Due], free: dict[str, int], now: datetime) -> tuple[list[Due], list[Due]]:
    """(go now, wait): each limited tenant's first `free[tenant]` executions go, in order."""
    left = dict(free)
    go: list[Due] = []
    wait: list[Due] = []
    for d in dues:
        if d.tenant not in left or late(d, now):
            go.append(d)
        elif left[d.tenant] > 0:
            left[d.tenant] -= 1
            go.append(d)
        else:
            wait.append(d)
    return go, wait


@dataclass
class TenantGate:
    """Which executions of a dispatch round their tenants' limits let go now."""

    _limits: dict[str, tuple[int | None, float]] = field(default_factory=dict)
    """tenant -> (max_running or None, when read on the monotonic clock)."""
    _waits: dict[str, timedelta] = field(default_factory=dict)
    """tenant -> how long its held executions wait before the next look."""

    async def _limits_of(self, conn: Conn, tenants: Sequence[str]) -> dict[str, int]:
        now = time.monotonic()
        stale = [
            t for t in tenants if now - self._limits.get(t, (None, -LIMITS_TTL))[1] >= LIMITS_TTL
        ]
        if stale:
            read = await store.tenant_limits(conn, stale)
            for tenant in stale:
                self._limits[tenant] = (read.get(tenant), now)
        found = {t: self._limits[t][0] for t in tenants}
        return {t: limit for t, limit in found.items() if limit is not None}

    async def admit(
        self, conn: Conn, dues: Sequence[Due], now: datetime
    ) -> tuple[list[Due], list[tuple[Due, datetime]]]:
        """(publish now, [(held back, look again at)])."""
        limits = await self._limits_of(conn, sorted({d.tenant for d in dues}))
        if not limits:
            return list(dues), []
        running = await store.tenants_running(conn, sorted(limits))
        free = {t: max(0, limit - running.get(t, 0)) for t, limit in limits.items()}
        go, wait = split(dues, free, now)
        waiting = {d.tenant for d in wait}
        for tenant in limits:
            if tenant not in waiting:
                self._waits.pop(tenant, None)
            elif free[tenant] > 0:  # slots free up: look again soon
                self._waits[tenant] = FIRST_WAIT
            else:  # none: look again later and later
                self._waits[tenant] = min(self._waits.get(tenant, FIRST_WAIT) * 2, LONGEST_WAIT)
        return go, [(d, now + self._waits[d.tenant]) for d in wait]

"""Tenants' `max_running` across store groups: each group's share, its allowance.

A claim counts a limited tenant's running executions in its own group only, against that
group's `tenants.allowance` (NULL: the whole limit). With two groups or more, the holder of
the maintenance Lease rebalances about every second: it copies each limit from the first
group (where the API sets it) to every group, gives each group a target from its demand
(running + backlog there, `targets`), then lowers allowances first, each under the tenant's
claim lock and never below what runs there now, and raises the others only by what that
freed plus what was unallocated. So the allowances never add up to more than the limit, and
neither do the tenant's running executions. With one group it does nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import timedelta

from horae.clock import utc_now
from horae.store import allowances as store
from horae.store.allowances import Demand, Limit
from horae.store.groups import MAIN, Store

log = logging.getLogger(__name__)

PERIOD = timedelta(seconds=1)
HORIZON = timedelta(seconds=5)
"""Scheduled executions due within this are backlog: a throttled one is put back due a
second or so later, and must still count."""


def targets(limit: int, demand: Mapping[str, int]) -> dict[str, int]:
    """Each group's share of `limit`, adding up to it: its demand when all demand fits,
    the rest spread evenly (so new work anywhere can start); otherwise shares in proportion
    to demand, at least one for each group with demand while that fits."""
    groups = sorted(demand)
    want = {g: max(0, demand[g]) for g in groups}
    if sum(want.values()) <= limit:
        spare = limit - sum(want.values())
        base, extra = divmod(spare, len(groups))
        order = sorted(groups, key=lambda g: (-want[g], g))
        return {g: want[g] + base + (1 if i < extra else 0) for i, g in enumerate(order)}
    demanding = [g for g in groups if want[g] > 0]
    floor = 1 if len(demanding) <= limit else 0
    share = {g: (floor if g in demanding else 0) for g in groups}
    rest = limit - sum(share.values())
    weight = {g: want[g] - share[g] for g in groups}
    total = sum(weight.values())
    exact = {g: rest * weight[g] / total for g in groups}
    for g in groups:
        share[g] += int(exact[g])
    left = limit - sum(share.values())
    for g in sorted(groups, key=lambda g: (-(exact[g] - int(exact[g])), g))[:left]:
        share[g] += 1
    return share


class Rebalancer:
    """Moves each limited tenant's allowances between store groups to follow demand."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def run(self, stop: asyncio.Event, holder: Callable[[], bool]) -> None:
        """Every `PERIOD` while `holder()` (this replica holds the maintenance Lease)."""
        while not stop.is_set():
            if holder():
                try:
                    await self.rebalance()
                except Exception:  # the loop must outlive any one failure
                    log.exception("rebalancing tenants' allowances failed")
            try:
                await asyncio.wait_for(stop.wait(), timeout=PERIOD.total_seconds())
            except TimeoutError:
                pass

    async def rebalance(self) -> dict[str, dict[str, int]]:
        """One pass; each limited tenant's allowance in each group after it (empty with one
        group, or when another replica's pass is under way)."""
        if len(self._store.groups()) < 2:
            return {}
        async with store.rebalancing(self._store.home) as alone:
            if not alone:
                return {}
            async with self._store.home.acquire() as conn:
                wanted = {n: x.max_running for n, x in (await store.limits(conn)).items()}
            here, demand = await self._survey(wanted)
            return {t: await self._move(t, limit, here, demand) for t, limit in wanted.items()}

    async def _survey(
        self, wanted: Mapping[str, int]
    ) -> tuple[dict[str, dict[str, Limit]], dict[str, dict[str, Demand]]]:
        """Copy the limits to every group; read each group's allowances and demand."""
        here: dict[str, dict[str, Limit]] = {}
        demand: dict[str, dict[str, Demand]] = {}
        due_before = utc_now() + HORIZON
        for group, database in self._store.each():
            async with database.acquire() as conn:
                if group == MAIN:
                    await store.clear_stale(conn)
                else:
                    await store.copy_limits(conn, wanted, await store.limits(conn))
                here[group] = await store.limits(conn)
                demand[group] = await store.demand(conn, wanted, due_before)
        return here, demand

    async def _move(
        self,
        tenant: str,
        limit: int,
        here: Mapping[str, Mapping[str, Limit]],
        demand: Mapping[str, Mapping[str, Demand]],
    ) -> dict[str, int]:
        """Lower, then raise within what is free, one tenant's allowances."""
        need = {g: demand[g][tenant].running + demand[g][tenant].backlog for g in here}
        goal = targets(limit, need)
        now: dict[str, int] = {}
        for group in sorted(here):
            current = here[group][tenant].allowance
            if current is None or goal[group] < current:
                async with self._store.database(group).acquire() as conn:
                    now[group] = await store.lower(conn, tenant, goal[group])
            else:
                now[group] = current
        free = limit - sum(now.values())
        for group in sorted(here, key=lambda g: (now[g] - goal[g], g)):
            more = min(goal[group] - now[group], free)
            if more > 0:
                async with self._store.database(group).acquire() as conn:
                    await store.raise_to(conn, tenant, now[group] + more)
                now[group] += more
                free -= more
        if any(here[g][tenant].allowance != now[g] for g in here):
            log.info("tenant %s: allowances %s of %d (demand %s)", tenant, now, limit, need)
        return now

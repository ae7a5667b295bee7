"""Each store group's share of a tenant's `max_running`, its allowance (the scheduler's
rebalancer, `horae.scheduler.allowances`): the limits copied from the first group, each
group's demand, and the writes that lower an allowance (under the tenant's claim lock) or
raise one."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from horae.store.boundary import translated, translating
from horae.store.queries import Q

if TYPE_CHECKING:
    from horae.store.db import Conn, Database


@dataclass(frozen=True)
class Limit:
    max_running: int
    allowance: int | None
    """This group's share (None: the whole limit)."""


@dataclass(frozen=True)
class Demand:
    running: int
    backlog: int
    """Queued, or scheduled and due (counted up to the tenant's limit)."""


@asynccontextmanager
async def rebalancing(home: Database) -> AsyncIterator[bool]:
    """For the block, the only rebalancer or not: whether the first group's advisory lock
    was got (held in a transaction until the block ends)."""
    async with home.acquire() as conn, translating(), conn.transaction():
        yield bool(await conn.fetchval(Q["allowances_lock"]))


@translated
async def limits(conn: Conn) -> dict[str, Limit]:
    """Every limited tenant of this group, with its allowance here."""
    rows = await conn.fetch(Q["limited_tenants"])
    return {r["name"]: Limit(r["max_running"], r["allowance"]) for r in rows}


@translated
async def copy_limits(conn: Conn, wanted: Mapping[str, int], here: Mapping[str, Limit]) -> None:
    """Make this group's limits those of the first group (`wanted`): set, changed or gone."""
    for name, limit in sorted(wanted.items()):
        if name not in here or here[name].max_running != limit:
            await conn.execute(Q["copy_limit"], name, limit)
    gone = sorted(set(here) - set(wanted))
    if gone:
        await conn.execute(Q["unlimit_tenants"], gone)


@translated
async def clear_stale(conn: Conn) -> None:
    await conn.execute(Q["clear_stale_allowances"])


@translated
async def demand(conn: Conn, caps: Mapping[str, int], due_before: datetime) -> dict[str, Demand]:
    """Each tenant's running executions and backlog in this group."""
    names: Sequence[str] = sorted(caps)
    rows = await conn.fetch(Q["tenant_demand"], names, [caps[n] for n in names], due_before)
    return {r["name"]: Demand(r["running"], r["backlog"]) for r in rows}


@translated
async def lower(conn: Conn, tenant: str, target: int) -> int:
    """Lower the tenant's allowance here to `target`, or to what runs here now if more; the
    allowance set."""
    async with conn.transaction():
        await conn.execute(Q["lock_tenant"], tenant)
        return int(await conn.fetchval(Q["lower_allowance"], tenant, target))


@translated
async def raise_to(conn: Conn, tenant: str, value: int) -> None:
    await conn.execute(Q["raise_allowance"], tenant, value)

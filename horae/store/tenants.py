"""Tenants: their settings (a limit of running executions, quotas) and what they use.

Settings are written to and read from the first store group (`main`); what a tenant uses
is summed over every group (`in_every_group`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from horae.store import quotas
from horae.store.boundary import translated
from horae.store.groups import MAIN
from horae.store.queries import Q
from horae.store.rows import TenantRow

if TYPE_CHECKING:
    from horae.store.db import Conn
    from horae.store.groups import Store


@translated
async def set_tenant_limit(
    conn: Conn,
    tenant: str,
    max_running: int | None,
    *,
    max_jobs: int | None = None,
    max_fires_per_minute: int | None = None,
) -> TenantRow:
    """Replace a tenant's settings (None: no running limit; the default quota); returns
    the tenant as `list_tenants` shows it."""
    await conn.execute(Q["upsert_tenant"], tenant, max_running, max_jobs, max_fires_per_minute)
    [row] = await list_tenants(conn, tenant)
    return row


@translated
async def list_tenants(conn: Conn, name: str | None = None) -> list[TenantRow]:
    """Tenants with their settings, the quotas in force (defaults filled in) and their use."""
    tenants = []
    for r in await conn.fetch(Q["list_tenants"], name):
        max_jobs, max_rate = quotas.in_force(r["max_jobs"], r["max_fires_per_minute"])
        tenants.append(
            TenantRow(
                name=r["name"],
                max_running=r["max_running"],
                max_jobs=max_jobs,
                max_fires_per_minute=max_rate,
                running=r["running"],
                jobs=r["jobs"],
                fires_per_minute=r["fires_per_minute"],
            )
        )
    return tenants


async def in_every_group(store: Store, name: str | None = None) -> list[TenantRow]:
    """`list_tenants` from the first group (the settings), with what each tenant uses summed
    over every group."""
    async with store.home.acquire() as conn:
        found = await list_tenants(conn, name)
    names = [t.name for t in found]
    for group, db in store.each():
        if group == MAIN or not names:
            continue
        async with db.acquire() as conn:
            used = await _usage(conn, names)
        found = [
            dataclasses.replace(
                t,
                running=t.running + used[t.name][0],
                jobs=t.jobs + used[t.name][1],
                fires_per_minute=t.fires_per_minute + used[t.name][2],
            )
            for t in found
        ]
    return found


@translated
async def _usage(conn: Conn, names: list[str]) -> dict[str, tuple[int, int, float]]:
    """Tenant -> (running, live jobs, fires per minute) in this group."""
    rows = await conn.fetch(Q["tenants_usage"], names)
    return {r["name"]: (r["running"], r["jobs"], r["fires_per_minute"]) for r in rows}

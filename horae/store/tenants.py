"""Tenants: their settings (a limit of running executions, quotas) and what they use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from horae.store import quotas
from horae.store.boundary import translated
from horae.store.queries import Q
from horae.store.rows import TenantRow

if TYPE_CHECKING:
    from horae.store.db import Conn


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

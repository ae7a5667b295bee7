"""Per-tenant quotas: how many live (active or paused) jobs a tenant may have, and how many
fires per minute they may add up to (`horae.schedule.fires_per_minute`: a cron job at its
densest, a one-off 1). An administrator sets them per tenant; a tenant without its own has
the defaults below. Every write that adds a job or a rate checks them here, under a
per-tenant lock, so two concurrent creates cannot both take the last place.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from horae.errors import QuotaExceeded
from horae.store.queries import Q

if TYPE_CHECKING:
    from horae.store.db import Conn

DEFAULT_MAX_JOBS = 100_000
"""Live jobs per tenant unless an administrator set another quota."""
DEFAULT_MAX_FIRES_PER_MINUTE = 100_000
"""Fires per minute per tenant (the sum of its live jobs' rates) unless set otherwise:
1,666 `* * * * * *` jobs, or 100,000 one-offs, or 144 million daily jobs (then max_jobs
binds first)."""


def in_force(max_jobs: int | None, max_fires_per_minute: int | None) -> tuple[int, int]:
    """A tenant's quotas in force, from its own settings (None: the default)."""
    return (
        max_jobs or DEFAULT_MAX_JOBS,
        max_fires_per_minute or DEFAULT_MAX_FIRES_PER_MINUTE,
    )


async def check(conn: Conn, adding: Iterable[tuple[str, int, float]]) -> None:
    """Raise QuotaExceeded unless every tenant can take what is added: (tenant, jobs,
    fires per minute) triples, summed per tenant. Call inside the transaction that writes
    them: the tenants' quota locks are held until it ends."""
    jobs: dict[str, int] = defaultdict(int)
    rates: dict[str, float] = defaultdict(float)
    for tenant, count, rate in adding:
        jobs[tenant] += count
        rates[tenant] += rate
    tenants = sorted(t for t in jobs if jobs[t] > 0 or rates[t] > 0)
    if not tenants:
        return
    await conn.execute(Q["lock_tenant_quotas"], tenants)
    for row in await conn.fetch(Q["tenant_quotas"], tenants):
        tenant = row["name"]
        max_jobs, max_rate = in_force(row["max_jobs"], row["max_fires_per_minute"])
        if jobs[tenant] > 0 and row["jobs"] + jobs[tenant] > max_jobs:
            raise QuotaExceeded(tenant, "max_jobs", max_jobs, row["jobs"], jobs[tenant])
        # (a small tolerance: sums of floats)
        if rates[tenant] > 0 and row["fires_per_minute"] + rates[tenant] > max_rate + 1e-6:
            raise QuotaExceeded(
                tenant, "max_fires_per_minute", max_rate, row["fires_per_minute"], rates[tenant]
            )

"""Per-tenant quotas: how many live (active or paused) jobs a tenant may have, and how many
fires per minute they may add up to (`horae.schedule.fires_per_minute`: a cron job at its
densest, a one-off 1). An administrator sets them per tenant; a tenant without its own has
the defaults below. Every write that adds a job or a rate checks them here once it has
written, under a per-tenant lock taken then, so two concurrent creates cannot both take the
last place, yet neither waits for the other's insert: only the count and the commit are
serialised per tenant (a rejected write is rolled back whole). What is read is a bound kept
per tenant (`tenant_use`, migration 020), not a count of the jobs: they are counted only
when the bound would fail a quota, so a check costs the same at 10 or 1,000,000 live jobs
unless the tenant is near its quota. A create is one statement that checks the bounds
itself (`new_jobs.insert_jobs`), made again in a transaction that counts when they fail.

With several store groups, a tenant's jobs are spread over them, and so is its use: a write
checks what it adds against the tenant's use summed over every group, with the quotas an
administrator set in the first group (`main`, where tenants' settings live). The lock is
each group's own, and the other groups' use is read just before the write's transaction:
creates running at the same moment in different groups do not see each other, so a tenant
may overshoot a quota by at most what such concurrent writes in the other groups add (a
single create adds one job, a batch at most its size in that group); within one group the
quota holds exactly. A create reads the other groups' bounds (`elsewhere(bounded=True)`),
and what they refuse it checks again with the use counted there. A group that cannot be
read (its primary down) counts with the use last read there by this process (none, if
never): a create in a healthy group never waits for, or fails with, another group.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from horae.errors import QuotaExceeded, StoreUnavailable
from horae.store.groups import MAIN
from horae.store.queries import Q

if TYPE_CHECKING:
    from asyncpg import Record

    from horae.store.db import Conn, Database
    from horae.store.groups import Store

log = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class Elsewhere:
    """Tenants' use in the store groups other than the one written, and their quotas as
    set in the first group (None: the default)."""

    used: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    """Tenant -> (live jobs, fires per minute) in the other groups."""
    settings: Mapping[str, tuple[int | None, int | None]] = field(default_factory=dict)
    """Tenant -> (max_jobs, max_fires_per_minute) as set in the first group."""


async def elsewhere(
    store: Store, group: str, tenants: Collection[str], *, bounded: bool = False
) -> Elsewhere | None:
    """What `tenants` use outside `group`, and their quotas from the first group; None
    with one group (the write's own group then knows everything). `bounded`: the use
    bounds kept there, counted only where none is (a create, the frequent write, reads
    these; what they refuse it asks again unbounded)."""
    if len(store.groups()) < 2 or not tenants:
        return None
    names = sorted(tenants)
    used: dict[str, tuple[int, float]] = {t: (0, 0.0) for t in names}
    settings: dict[str, tuple[int | None, int | None]] = {}
    for name, db in store.each():
        if name == group:
            continue  # the write's own group: counted (and, in main, set) under its lock
        rows = await _use_in(name, db, names, bounded)
        for tenant, (jobs, rate, max_jobs, max_rate) in rows.items():
            if name == MAIN:
                settings[tenant] = (max_jobs, max_rate)
            before = used[tenant]
            used[tenant] = (before[0] + jobs, before[1] + rate)
    return Elsewhere(used, settings)


class ToCount(Exception):
    """A create checked by its tenants' bounds in its own statement found one that would fail
    a quota, or none kept yet: nothing was written; make it again in a transaction that
    counts (`check`)."""


def bound_parameters(elsewhere: Elsewhere | None, *, checked: bool) -> list[object]:
    """The quota parameters of `insert_jobs` ($35-$43): the defaults, the other groups' use
    and main's settings per tenant, and whether the statement checks the bounds itself."""
    used = elsewhere.used if elsewhere else {}
    settings = elsewhere.settings if elsewhere else {}
    names = sorted(set(used) | set(settings))
    return [
        DEFAULT_MAX_JOBS,
        DEFAULT_MAX_FIRES_PER_MINUTE,
        names,
        [used.get(t, (0, 0.0))[0] for t in names],
        [used.get(t, (0, 0.0))[1] for t in names],
        [t in settings for t in names],
        [settings.get(t, (None, None))[0] for t in names],
        [settings.get(t, (None, None))[1] for t in names],
        checked,
    ]


_Use = tuple[int, float, "int | None", "int | None"]
_LAST_READ: dict[tuple[str, str], _Use] = {}
"""(group, tenant) -> what was last read there: what an unreachable group counts with."""


async def _use_in(group: str, db: Database, names: list[str], bounded: bool) -> dict[str, _Use]:
    try:
        async with db.acquire() as conn:
            if bounded:
                rows = await conn.fetch(Q["tenant_quota_bounds"], names)
            else:
                rows = await conn.fetch(Q["tenant_quotas"], names)
    except StoreUnavailable:
        log.warning("store group %s unreachable: its quota use counted as last read", group)
        return {t: _LAST_READ[group, t] for t in names if (group, t) in _LAST_READ}
    found = {
        r["name"]: (r["jobs"], r["fires_per_minute"], r["max_jobs"], r["max_fires_per_minute"])
        for r in rows
    }
    for tenant, use in found.items():
        _LAST_READ[group, tenant] = use
    return found


async def check(
    conn: Conn,
    adding: Iterable[tuple[str, int, float]],
    elsewhere: Elsewhere | None = None,
    *,
    locked: bool = False,
) -> None:
    """Raise QuotaExceeded unless every tenant can take what was added: (tenant, jobs,
    fires per minute) triples, summed per tenant. Call inside the transaction that wrote
    them, after the write (the caller rolls back on QuotaExceeded): the tenants' quota locks
    are held until the transaction ends. `elsewhere`: the tenants' use in the other store
    groups, and their quotas (see the module). `locked`: the write's own statement took the
    tenants' quota locks (`insert_jobs` does).

    A tenant's use here is read from its bound (`tenant_use`, raised by what is added); only
    when the bound would fail a quota, or none is kept yet, are its live jobs counted (the
    count includes the write) and the bound set to the count."""
    jobs: dict[str, int] = defaultdict(int)
    rates: dict[str, float] = defaultdict(float)
    for tenant, count, rate in adding:
        jobs[tenant] += count
        rates[tenant] += rate
    tenants = sorted(t for t in jobs if jobs[t] > 0 or rates[t] > 0)
    if not tenants:
        return
    if not locked:
        await conn.execute(Q["lock_tenant_quotas"], tenants)
    bounds = await conn.fetch(
        Q["bump_tenant_use"], tenants, [jobs[t] for t in tenants], [rates[t] for t in tenants]
    )
    recount = [r["name"] for r in bounds if r["jobs"] is None or _over(r, jobs, rates, elsewhere)]
    if not recount:
        return
    counted = await conn.fetch(Q["tenant_quotas"], recount)
    for row in counted:
        if over := _over(row, jobs, rates, elsewhere):
            raise over
    await conn.execute(
        Q["set_tenant_use"],
        [r["name"] for r in counted],
        [r["jobs"] for r in counted],
        [r["fires_per_minute"] for r in counted],
    )


def _over(
    row: Record,
    jobs: Mapping[str, int],
    rates: Mapping[str, float],
    elsewhere: Elsewhere | None,
) -> QuotaExceeded | None:
    """The quota a tenant's use after the write (`row`: here, counting the write) and
    elsewhere passes, if any."""
    tenant = row["name"]
    own = (row["max_jobs"], row["max_fires_per_minute"])
    max_jobs, max_rate = in_force(*(elsewhere.settings.get(tenant, own) if elsewhere else own))
    other_jobs, other_rate = elsewhere.used.get(tenant, (0, 0.0)) if elsewhere else (0, 0.0)
    # What the tenant used before this write.
    used_jobs = row["jobs"] - jobs[tenant] + other_jobs
    used_rate = row["fires_per_minute"] - rates[tenant] + other_rate
    if jobs[tenant] > 0 and used_jobs + jobs[tenant] > max_jobs:
        return QuotaExceeded(tenant, "max_jobs", max_jobs, used_jobs, jobs[tenant])
    # (a small tolerance: sums of floats)
    if rates[tenant] > 0 and used_rate + rates[tenant] > max_rate + 1e-6:
        return QuotaExceeded(tenant, "max_fires_per_minute", max_rate, used_rate, rates[tenant])
    return None

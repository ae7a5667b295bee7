"""Per-tenant quotas (live jobs, fires per minute): set by an administrator through
`PUT /tenants/{name}`; a write over one answers 429 naming it, and writes nothing."""

from __future__ import annotations

import asyncpg
import httpx

from tests.integration.api.conftest import Tenants, bearer


def every_second(name: str = "tick") -> dict[str, object]:
    return {"task": "report", "cron": "* * * * * *", "name": name}


async def live_jobs(pool: asyncpg.Pool, tenant: str) -> int:
    return int(await pool.fetchval("SELECT count(*) FROM jobs WHERE tenant = $1", tenant))


async def test_a_tenant_at_its_job_quota_gets_429_naming_it_and_nothing_is_stored(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    alice, admin = bearer(tenants.alice), bearer(tenants.admin)
    r = await api.put(
        f"/tenants/{tenants.a}", json={"max_running": None, "max_jobs": 2}, headers=admin
    )
    assert r.status_code == 200 and r.json()["max_jobs"] == 2, r.text
    one_off = {"task": "report", "run_at": "2099-01-01T00:00:00Z"}
    for _ in range(2):
        assert (await api.post("/jobs", json=one_off, headers=alice)).status_code == 201
    over = await api.post("/jobs", json=one_off, headers=alice)
    assert over.status_code == 429, over.text
    assert over.headers["content-type"].startswith("application/problem+json")
    assert over.json()["title"] == "Quota exceeded"
    assert [e["field"] for e in over.json()["errors"]] == ["max_jobs"]
    assert f"tenant {tenants.a} is at its quota max_jobs=2" in over.json()["detail"]
    batch = await api.post("/jobs:batch", json={"jobs": [one_off]}, headers=alice)
    assert batch.status_code == 429 and batch.json()["errors"][0]["field"] == "max_jobs"
    assert await live_jobs(pool, tenants.a) == 2
    # another tenant is not bound by it; cancelling one frees a place
    assert (await api.post("/jobs", json=one_off, headers=bearer(tenants.bob))).status_code == 201
    first = await pool.fetchval("SELECT id FROM jobs WHERE tenant = $1 LIMIT 1", tenants.a)
    assert (await api.delete(f"/jobs/{first}", headers=alice)).status_code == 204
    assert (await api.post("/jobs", json=one_off, headers=alice)).status_code == 201
    listed = await api.put(
        f"/tenants/{tenants.a}", json={"max_running": None, "max_jobs": 2}, headers=admin
    )
    assert listed.json()["jobs"] == 2


async def test_the_fire_rate_quota_counts_a_cron_job_at_its_densest_and_edits_too(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    alice, admin = bearer(tenants.alice), bearer(tenants.admin)
    r = await api.put(
        f"/tenants/{tenants.a}",
        json={"max_running": None, "max_fires_per_minute": 100},
        headers=admin,
    )
    assert r.status_code == 200
    first = await api.post("/jobs", json=every_second("a"), headers=alice)  # 60 a minute
    assert first.status_code == 201
    over = await api.post("/jobs", json=every_second("b"), headers=alice)
    assert over.status_code == 429 and over.json()["errors"][0]["field"] == "max_fires_per_minute"
    slow = await api.post("/jobs", json={"task": "report", "cron": "*/2 * * * * *"}, headers=alice)
    assert slow.status_code == 201  # 30 a minute: 90 in all
    job_id = slow.json()["id"]
    faster = await api.patch(f"/jobs/{job_id}", json={"cron": "* * * * * *"}, headers=alice)
    assert faster.status_code == 429, faster.text
    row = await pool.fetchrow("SELECT cron, spec_version FROM jobs WHERE id = $1::uuid", job_id)
    assert (row["cron"], row["spec_version"]) == ("*/2 * * * * *", 1)
    shown = await api.put(
        f"/tenants/{tenants.a}",
        json={"max_running": None, "max_fires_per_minute": 100},
        headers=admin,
    )
    assert shown.json()["fires_per_minute"] == 90.0


async def test_quotas_are_refused_out_of_range_naming_the_field(
    api: httpx.AsyncClient, tenants: Tenants
) -> None:
    r = await api.put(
        f"/tenants/{tenants.a}",
        json={"max_running": None, "max_jobs": 0},
        headers=bearer(tenants.admin),
    )
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "max_jobs"

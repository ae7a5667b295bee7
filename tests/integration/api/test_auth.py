"""Authentication with TokenReview, authorization with SubjectAccessReview, per tenant."""

from __future__ import annotations

import httpx

from tests.integration.api.conftest import Tenants, bearer

JOB = {"task": "t", "cron": "0 * * * *"}


async def test_no_token_or_a_bad_token_is_401(api: httpx.AsyncClient) -> None:
    r = await api.get("/jobs")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert r.headers["content-type"] == "application/problem+json"
    r = await api.get("/jobs", headers=bearer("not-a-token"))
    assert r.status_code == 401


async def test_another_tenants_job_is_invisible(api: httpx.AsyncClient, tenants: Tenants) -> None:
    job_id = (await api.post("/jobs", json=JOB, headers=bearer(tenants.alice))).json()["id"]
    for method, path in [("GET", f"/jobs/{job_id}"), ("DELETE", f"/jobs/{job_id}"),
                         ("POST", f"/jobs/{job_id}:pause"),
                         ("GET", f"/jobs/{job_id}/executions")]:  # fmt: skip
        r = await api.request(method, path, headers=bearer(tenants.bob))
        assert r.status_code == 404, (method, path, r.text)
    assert (await api.get("/jobs", headers=bearer(tenants.bob))).json()["items"] == []
    assert (await api.get(f"/jobs/{job_id}", headers=bearer(tenants.alice))).status_code == 200


async def test_acting_in_another_namespace_needs_rbac_there(
    api: httpx.AsyncClient, tenants: Tenants
) -> None:
    r = await api.get("/jobs", headers={**bearer(tenants.bob), "Horae-Tenant": tenants.a})
    assert r.status_code == 403
    assert tenants.a in r.json()["detail"]


async def test_a_missing_verb_is_403(api: httpx.AsyncClient, tenants: Tenants) -> None:
    assert (await api.get("/jobs", headers=bearer(tenants.reader))).status_code == 200
    r = await api.post("/jobs", json=JOB, headers=bearer(tenants.reader))
    assert r.status_code == 403
    assert "may not create jobs" in r.json()["detail"]

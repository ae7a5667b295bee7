"""Authentication with TokenReview, authorization with SubjectAccessReview, per tenant:
the whole matrix against the real kube-apiserver."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from horae.models import JobSource, JobSpec
from horae.store import jobs
from tests.integration.api.conftest import Tenants, bearer
from tests.support.kube import ControlPlane
from tests.support.tokens import service_account_token

JOB = {"task": "t", "cron": "0 * * * *"}


def _signed(plane: ControlPlane, tenants: Tenants, *, issued: datetime, lifetime: timedelta) -> str:
    uid = plane.kubectl("get", "serviceaccount", "alice", "-n", tenants.a,
                        "-o", "jsonpath={.metadata.uid}").stdout  # fmt: skip
    return service_account_token(
        plane.dir / "sa.key", namespace=tenants.a, name="alice", uid=uid, issued=issued,
        lifetime=lifetime,
    )  # fmt: skip


def _credentials(plane: ControlPlane, tenants: Tenants, who: str) -> dict[str, str]:
    now = datetime.now(UTC)
    match who:
        case "no token":
            return {}
        case "not a bearer":
            return {"Authorization": f"Basic {tenants.alice}"}
        case "bad token":
            return bearer("not-a-token")
        case "expired token":  # alice's, signed by the cluster's key, expired 1 h ago
            return bearer(_signed(plane, tenants, issued=now - timedelta(hours=2),
                                  lifetime=timedelta(hours=1)))  # fmt: skip
        case "same token, not expired":  # the control: only the expiry differs
            return bearer(_signed(plane, tenants, issued=now - timedelta(minutes=1),
                                  lifetime=timedelta(hours=1)))  # fmt: skip
        case "alice":
            return bearer(tenants.alice)
        case "reader":
            return bearer(tenants.reader)
        case "bob in alice's tenant":
            return {**bearer(tenants.bob), "Horae-Tenant": tenants.a}
        case "admin":
            return bearer(tenants.admin)
    raise AssertionError(who)


MATRIX = [
    # (who, method, path, status)
    ("no token", "GET", "/jobs", 401),
    ("not a bearer", "GET", "/jobs", 401),
    ("bad token", "GET", "/jobs", 401),
    ("expired token", "GET", "/jobs", 401),
    ("expired token", "POST", "/jobs", 401),
    ("same token, not expired", "GET", "/jobs", 200),
    ("alice", "GET", "/jobs", 200),
    ("alice", "POST", "/jobs", 201),
    ("reader", "GET", "/jobs", 200),
    ("reader", "POST", "/jobs", 403),  # a missing verb
    ("bob in alice's tenant", "GET", "/jobs", 403),  # no RBAC in that namespace
    ("bob in alice's tenant", "POST", "/jobs", 403),
]


@pytest.mark.parametrize(("who", "method", "path", "status"), MATRIX,
                         ids=[f"{w}-{m}-{s}" for w, m, _, s in MATRIX])  # fmt: skip
async def test_authentication_and_authorization_matrix(
    api: httpx.AsyncClient, control_plane: ControlPlane, tenants: Tenants,
    who: str, method: str, path: str, status: int,
) -> None:  # fmt: skip
    headers = _credentials(control_plane, tenants, who)
    r = await api.request(method, path, headers=headers, json=JOB if method == "POST" else None)
    assert r.status_code == status, r.text
    if status >= 400:
        assert r.headers["content-type"] == "application/problem+json"
    if status == 401:
        assert r.headers["www-authenticate"] == "Bearer"
    if status == 403:
        assert tenants.a in r.json()["detail"]


async def test_another_tenants_job_is_invisible(api: httpx.AsyncClient, tenants: Tenants) -> None:
    job_id = (await api.post("/jobs", json=JOB, headers=bearer(tenants.alice))).json()["id"]
    for method, path in [("GET", f"/jobs/{job_id}"), ("DELETE", f"/jobs/{job_id}"),
                         ("POST", f"/jobs/{job_id}:pause"),
                         ("GET", f"/jobs/{job_id}/executions")]:  # fmt: skip
        r = await api.request(method, path, headers=bearer(tenants.bob))
        assert r.status_code == 404, (method, path, r.text)
    assert (await api.get("/jobs", headers=bearer(tenants.bob))).json()["items"] == []
    assert (await api.get(f"/jobs/{job_id}", headers=bearer(tenants.alice))).status_code == 200


# Every route, as each kind of caller meets it. A job of alice's tenant (`{job}`, made by the
# API; `{crd}`, a ScheduledJob's) and a dead execution of `{job}` (`{dead}`) exist first.
ROUTES = [
    # (method, path, body, verb-kind): "read" needs get/list, "write" create/update/delete
    ("POST", "/jobs", JOB, "write"),
    ("POST", "/jobs:batch", {"jobs": [JOB]}, "write"),
    ("GET", "/jobs", None, "read"),
    ("GET", "/jobs/{job}", None, "read"),
    ("PATCH", "/jobs/{job}", {"cron": "5 * * * *"}, "write"),
    ("DELETE", "/jobs/{job}", None, "write"),
    ("POST", "/jobs/{job}:pause", None, "write"),
    ("POST", "/jobs/{job}:resume", None, "write"),
    ("POST", "/jobs/{job}:trigger", None, "write"),
    ("GET", "/jobs/{job}/executions", None, "read"),
    ("GET", "/executions/{dead}", None, "read"),
    ("POST", "/executions/{dead}:rerun", None, "write"),
    ("PATCH", "/jobs/{crd}", {"cron": "5 * * * *"}, "manifest"),
    ("DELETE", "/jobs/{crd}", None, "manifest"),
    ("POST", "/jobs/{crd}:pause", None, "manifest"),
    ("POST", "/jobs/{crd}:resume", None, "manifest"),
    ("PUT", "/tenants/{tenant}", {"max_running": 3}, "admin"),
    ("POST", "/schedules:preview", {"cron": "* * * * *", "count": 2}, "open"),
]


def _expected(who: str, method: str, path: str, kind: str) -> int:
    if kind == "open":
        return 200
    if who == "no token":
        return 401
    allowed = {
        "alice": kind in ("read", "write", "manifest"),
        "reader": kind == "read",
        "bob in alice's tenant": False,
        "admin": kind == "admin",
    }[who]
    if not allowed:
        return 403
    if kind == "manifest":
        return 409
    if method == "DELETE":
        return 204
    if method == "POST" and path.endswith((":pause", ":resume")):
        return 204
    if method == "POST":
        return 201
    return 200


CALLERS = ["no token", "reader", "bob in alice's tenant", "admin", "alice"]
"""Refusals first, each leaving the state as it was, and the caller allowed last."""


@pytest.mark.parametrize(("method", "path", "body", "kind"), ROUTES,
                         ids=[f"{m} {p}" for m, p, _, _ in ROUTES])  # fmt: skip
async def test_every_route_answers_every_caller_as_rbac_and_ownership_say(
    api: httpx.AsyncClient, control_plane: ControlPlane, tenants: Tenants, pool: asyncpg.Pool,
    method: str, path: str, body: dict[str, Any] | None, kind: str,
) -> None:  # fmt: skip
    job = (await api.post("/jobs", json=JOB, headers=bearer(tenants.alice))).json()["id"]
    dead = await pool.fetchval(
        "UPDATE executions SET status = 'dead', started_at = now(), finished_at = now(),"
        " error_kind = 'E', error_message = 'x' WHERE job_id = $1 RETURNING id",
        uuid.UUID(job),
    )
    async with pool.acquire() as conn:
        crd = await jobs.create_job(
            conn, JobSpec(task="t", cron="0 * * * *"), tenant=tenants.a, source=JobSource.CRD,
            shards=64, now=datetime.now(UTC), name="nightly",
        )  # fmt: skip
    url = path.format(job=job, dead=dead, crd=crd, tenant=tenants.a)
    callers = sorted(CALLERS, key=lambda w: _expected(w, method, path, kind) < 400)
    for who in callers:
        headers = {} if who == "no token" else _credentials(control_plane, tenants, who)
        if who == "admin":
            headers["Horae-Tenant"] = tenants.a
        r = await api.request(method, url, headers=headers, json=body)
        want = _expected(who, method, path, kind)
        assert r.status_code == want, (who, method, url, r.text)
        if want >= 400:
            assert r.headers["content-type"] == "application/problem+json", (who, r.text)
        if want == 409:
            assert "kubectl edit scheduledjob/nightly" in r.json()["detail"]
        if want < 400 and method != "GET" and kind != "open":
            assert who == callers[-1]  # a write took effect: nobody comes after it

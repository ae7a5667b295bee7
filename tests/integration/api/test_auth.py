"""Authentication with TokenReview, authorization with SubjectAccessReview, per tenant:
the whole matrix against the real kube-apiserver."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

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

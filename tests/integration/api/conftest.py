"""The job API in-process (ASGI) on a real PostgreSQL, authenticating callers with
TokenReview/SubjectAccessReview against the real kube-apiserver."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from horae.api.app import create_app
from horae.api.auth import KubernetesAuth
from horae.kube import Reviews, load_api_client
from tests.support.kube import ControlPlane, free_port
from tests.support.processes import HORAE, REPO

FUZZ_TOKEN = "fuzz-token"
"""The static token of `api_url`'s process: tenant `fuzz`, every verb."""

ROLE = """
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: {name}, namespace: {ns}}}
rules:
- apiGroups: [horae.dev]
  resources: [jobs, tenants]
  verbs: [{verbs}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {name}, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {name}}}
subjects:
- {{kind: ServiceAccount, name: {name}, namespace: {ns}}}
"""


ADMIN = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {name}}}
rules:
- apiGroups: [horae.dev]
  resources: [tenants]
  verbs: [update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {name}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {name}}}
subjects:
- {{kind: ServiceAccount, name: admin, namespace: {ns}}}
"""
"""As the chart's `horae-tenant-admin` ClusterRole, bound cluster-wide."""


@dataclass(frozen=True)
class Tenants:
    a: str
    b: str
    alice: str  # full access in a
    bob: str  # full access in b
    reader: str  # get/list only in a
    admin: str  # tenant limits, cluster-wide (and nothing in a)


def _account(plane: ControlPlane, ns: str, name: str, verbs: str) -> str:
    plane.kubectl("create", "serviceaccount", name, "-n", ns)
    plane.kubectl("apply", "-f", "-", input=ROLE.format(name=name, ns=ns, verbs=verbs))
    return plane.kubectl("create", "token", name, "-n", ns, "--duration=1h").stdout.strip()


def _admin(plane: ControlPlane, ns: str, role: str) -> str:
    plane.kubectl("create", "serviceaccount", "admin", "-n", ns)
    plane.kubectl("apply", "-f", "-", input=ADMIN.format(name=role, ns=ns))
    return plane.kubectl("create", "token", "admin", "-n", ns, "--duration=1h").stdout.strip()


@pytest.fixture(scope="session")
def tenants(control_plane: ControlPlane) -> Tenants:
    suffix = uuid.uuid4().hex[:6]
    a, b = f"team-a-{suffix}", f"team-b-{suffix}"
    for ns in (a, b):
        control_plane.kubectl("create", "namespace", ns)
    full = "create, get, list, update, delete"
    return Tenants(
        a=a, b=b, alice=_account(control_plane, a, "alice", full),
        bob=_account(control_plane, b, "bob", full),
        reader=_account(control_plane, a, "reader", "get, list"),
        admin=_admin(control_plane, a, f"horae-tenant-admin-{suffix}"),
    )  # fmt: skip


@pytest_asyncio.fixture
async def api(
    db_url: str, component_kubeconfigs: dict[str, Path]
) -> AsyncIterator[httpx.AsyncClient]:
    # As the chart's API ServiceAccount: TokenReview and SubjectAccessReview, nothing more.
    auth = KubernetesAuth(Reviews(load_api_client(str(component_kubeconfigs["api"]))))
    app = create_app(dsn=db_url, auth=auth, pool_size=4)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://horae") as client:
            yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def api_url(db_url: str, tmp_path: Path) -> Iterator[str]:
    """A real `horae api` process on a fresh database, with one static token (FUZZ_TOKEN,
    tenant `fuzz`) and no Kubernetes authentication."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{FUZZ_TOKEN},fuzz\n")
    port = free_port()
    log = (tmp_path / "api.log").open("wb")
    proc = subprocess.Popen(
        [HORAE, "api", "--port", str(port)],
        env={**os.environ, "HORAE_DATABASE_URL": db_url, "HORAE_API_TOKENS_FILE": str(tokens),
             "HORAE_API_KUBERNETES_AUTH": "false", "HORAE_LOG_LEVEL": "WARNING"},
        stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                break
            subprocess.run(["sleep", "0.1"], check=True)  # the server is another process
        else:
            raise AssertionError("horae api did not become ready")
        assert proc.poll() is None, (tmp_path / "api.log").read_text()
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        print((tmp_path / "api.log").read_text(), file=sys.stderr)

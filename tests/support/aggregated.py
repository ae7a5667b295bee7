"""`horae aggregated-api` behind the local control plane's aggregation layer, as a test
fixture: the test's own server (on its database), registered with kube-apiserver as the
APIService `v1alpha1.runs.horae.dev`, so that `kubectl get executions` reaches it through
the real path (front-proxy client certificate, request-header CA, SubjectAccessReview).

The local plane has no kube-proxy and no pod network: the APIService names an
ExternalName Service `localhost`, which the aggregator dials at
`https://localhost:<APIService service.port>` (k8s.io/apiserver's ResolveCluster), and it
verifies the serving certificate for `horae-aggregated-api.horae-system.svc` against the
APIService's caBundle, as in a cluster.

The APIService is cluster-wide while tests run one after another, each with its own
database: each use of the fixture points it at that test's server, and its teardown
deletes it, so that no later test meets an APIService whose server is gone (kube-apiserver
would then answer the group with 503 and kubectl, helm and the discovery of every client
would report it)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from tests.support.certs import ServingCert, serving_cert
from tests.support.chart import INSTALL_NAMESPACE
from tests.support.kube import ControlPlane, free_port, service_account_kubeconfig
from tests.support.processes import Component, Processes

GROUP = "runs.horae.dev"
VERSION = "v1alpha1"
APISERVICE = f"{VERSION}.{GROUP}"
SERVICE = "horae-aggregated-api"
"""The chart's Service and ServiceAccount names for release `horae` (also the name the
serving certificate is for)."""
DB_ROLE = "viewer"
"""The server's PostgreSQL login role (tests/support/db_roles.py): one in horae_viewer
(migration 014), as the chart's `database.roles.viewer`."""
START_TIMEOUT = 30.0


@dataclass(frozen=True)
class ExecutionsApi:
    """The test's `horae aggregated-api`, serving `kubectl get executions`."""

    component: Component
    port: int
    """Its HTTPS port (the APIService's service.port)."""
    metrics_port: int
    cert: ServingCert


def registration(*, port: int, ca_pem: str) -> str:
    """The ExternalName Service and the APIService that route `runs.horae.dev/v1alpha1`
    to a server on `localhost:port` whose serving certificate `ca_pem` signed."""
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": INSTALL_NAMESPACE},
        "spec": {"type": "ExternalName", "externalName": "localhost",
                 "ports": [{"name": "https", "port": port}]},
    }  # fmt: skip
    api_service = {
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": APISERVICE},
        "spec": {
            "group": GROUP, "version": VERSION,
            "service": {"namespace": INSTALL_NAMESPACE, "name": SERVICE, "port": port},
            "caBundle": _b64(ca_pem), "insecureSkipTLSVerify": False,
            "groupPriorityMinimum": 1100, "versionPriority": 100,
        },
    }  # fmt: skip
    return "\n---\n".join(json.dumps(doc) for doc in (service, api_service))


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def availability(plane: ControlPlane) -> tuple[str, str]:
    """The APIService's condition Available: (status, message); ("", "") if it has none."""
    result = plane.kubectl("get", "apiservice", APISERVICE, "-o", "json", check=False)
    if result.returncode != 0:
        return "", result.stderr.strip()
    for condition in json.loads(result.stdout).get("status", {}).get("conditions", []):
        if condition["type"] == "Available":
            return condition["status"], condition.get("message", "")
    return "", ""


def refresh_discovery(plane: ControlPlane) -> None:
    """Drop kubectl's cached discovery for `plane` (`api-resources` without --cached
    fetches it anew): otherwise a kubectl that cached the groups before the APIService
    came (or went) would still resolve `executions` as it did then."""
    plane.kubectl("api-resources", "--api-group", GROUP, check=False)


async def _until(
    probe: Callable[[], Awaitable[bool | str]], *, what: str, server: Component
) -> None:
    """Await `probe` until it returns True (anything else says what is still missing),
    failing with the server's log if it exits or `START_TIMEOUT` passes."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if not server.alive():
            raise AssertionError(f"horae aggregated-api exited while waiting for {what}:\n"
                                 f"{server.log()[-3000:]}")  # fmt: skip
        last = await probe()
        if last is True:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {START_TIMEOUT}s waiting for {what}: {last}\n"
                                 f"{server.log()[-3000:]}")  # fmt: skip
        await asyncio.sleep(0.2)


async def start_executions_api(
    processes: Processes, plane: ControlPlane, *, cert: ServingCert, kubeconfig: Path,
    database_url: str,
) -> ExecutionsApi:  # fmt: skip
    """Start `horae aggregated-api` on free ports, point the APIService at it, and return
    once kube-apiserver finds it Available and `kubectl get executions` is answered by it."""
    port, metrics_port = free_port(), free_port()
    server = processes.start(
        "aggregated-api", "aggregated-api",
        env={
            "HORAE_AGGREGATED_HOST": "127.0.0.1",
            "HORAE_AGGREGATED_PORT": str(port),
            "KUBECONFIG": str(kubeconfig),
            "HORAE_DATABASE_URL": database_url,
            "HORAE_TLS_CERT_FILE": str(cert.cert_file),
            "HORAE_TLS_KEY_FILE": str(cert.key_file),
            "HORAE_METRICS_PORT": str(metrics_port),
        },
    )  # fmt: skip

    async def ready() -> bool | str:
        try:
            async with httpx.AsyncClient() as http:
                response = await http.get(f"http://127.0.0.1:{metrics_port}/readyz", timeout=1)
        except httpx.TransportError as exc:
            return f"/readyz: {exc!r}"
        return response.status_code == 200 or f"/readyz: {response.status_code} {response.text}"

    await _until(ready, what="the server's /readyz", server=server)
    plane.kubectl("apply", "-f", "-", input=registration(port=port, ca_pem=cert.ca_pem))

    async def available() -> bool | str:
        status, message = availability(plane)
        return status == "True" or f"Available={status!r}: {message}"

    await _until(available, what=f"APIService {APISERVICE} to be Available", server=server)
    refresh_discovery(plane)

    async def answers() -> bool | str:
        result = plane.kubectl("get", f"executions.{VERSION}.{GROUP}", "-n", "default",
                               check=False)  # fmt: skip
        return result.returncode == 0 or result.stderr.strip()

    await _until(answers, what="kubectl get executions to be answered", server=server)
    return ExecutionsApi(component=server, port=port, metrics_port=metrics_port, cert=cert)


def unregister(plane: ControlPlane) -> None:
    """Delete the APIService (its Service and namespace are harmless left behind) and
    refresh kubectl's discovery, so the next test meets the cluster without it."""
    plane.kubectl("delete", "apiservice", APISERVICE, "--ignore-not-found", check=False)
    refresh_discovery(plane)


@pytest.fixture(scope="session")
def aggregated_serving_cert(tmp_path_factory: pytest.TempPathFactory) -> ServingCert:
    """A CA and the serving certificate it signs, shared by the session's servers."""
    return serving_cert(tmp_path_factory.mktemp("aggregated-certs"),
                        service=SERVICE, namespace=INSTALL_NAMESPACE)  # fmt: skip


@pytest.fixture(scope="session")
def aggregated_api_kubeconfig(
    control_plane: ControlPlane, component_kubeconfigs: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:  # fmt: skip
    """The server runs as the chart's ServiceAccount `horae-aggregated-api` under the
    chart's RBAC (system:auth-delegator for its SubjectAccessReviews, the reader of
    kube-system/extension-apiserver-authentication), which `component_kubeconfigs`
    applied, never as admin."""
    path = tmp_path_factory.mktemp("aggregated-account") / "aggregated-api.kubeconfig"
    return service_account_kubeconfig(control_plane, INSTALL_NAMESPACE, SERVICE, path)


@pytest_asyncio.fixture
async def executions_api(
    processes: Processes, control_plane: ControlPlane, role_urls: dict[str, str],
    aggregated_serving_cert: ServingCert, aggregated_api_kubeconfig: Path,
) -> AsyncIterator[ExecutionsApi]:  # fmt: skip
    """This test's `horae aggregated-api` on its database, behind the APIService
    `v1alpha1.runs.horae.dev`: `kubectl get executions` answers from the test's store."""
    try:
        yield await start_executions_api(
            processes, control_plane, cert=aggregated_serving_cert,
            kubeconfig=aggregated_api_kubeconfig, database_url=role_urls[DB_ROLE],
        )  # fmt: skip
    finally:
        unregister(control_plane)

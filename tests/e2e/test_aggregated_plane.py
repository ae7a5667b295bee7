"""The local control plane's aggregation layer carries `kubectl` to `horae aggregated-api`
(tests/support/aggregated.py): the APIService is Available, discovery lists the resource,
the CRD mirror's group yields to it, and the server believes only the front proxy: the
user its headers name, on a connection whose client certificate the plane's front-proxy
CA signed (hack/k8s-up.sh)."""

from __future__ import annotations

import json
import ssl

import httpx
import pytest

from tests.support.aggregated import APISERVICE, GROUP, VERSION, ExecutionsApi, availability
from tests.support.kube import ControlPlane


def test_kubectl_reaches_the_aggregated_api_before_the_crd(
    control_plane: ControlPlane, namespace: str, executions_api: ExecutionsApi
) -> None:
    assert availability(control_plane)[0] == "True", APISERVICE
    resources = control_plane.kubectl("api-resources", "--api-group", GROUP, "-o", "wide")
    [row] = [line.split() for line in resources.stdout.splitlines()[1:]]
    assert row == ["executions", "ex", f"{GROUP}/{VERSION}", "true", "Execution",
                   "get,list,watch", "horae"]  # fmt: skip

    # The session applied the CRD (horae.dev, the opt-in mirror's) too: both groups serve
    # `executions`, and the APIService's priority (1100 over a CRD's 1000) wins the name.
    control_plane.kubectl("get", "crd", "executions.horae.dev")
    listed = control_plane.kubectl("get", "executions", "-n", namespace, "-o", "json", "-v=6")
    assert json.loads(listed.stdout)["items"] == []
    assert f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/executions" in listed.stderr
    short = control_plane.kubectl("get", "ex", "-n", namespace, "-v=6")
    assert f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/executions" in short.stderr


async def test_the_server_believes_only_the_front_proxy_and_names_its_user(
    control_plane: ControlPlane, namespace: str, executions_api: ExecutionsApi
) -> None:
    """Called directly, as kube-apiserver calls it: with the front proxy's client
    certificate the user in X-Remote-User is the one authorized (a user with no grant is
    refused by name, the admin's group may list); without it, no handshake."""
    certs = control_plane.dir / "certs"
    url = (f"https://127.0.0.1:{executions_api.port}/apis/{GROUP}/{VERSION}"
           f"/namespaces/{namespace}/executions")  # fmt: skip
    proxy = ssl.create_default_context(cafile=str(executions_api.cert.ca_file))
    proxy.load_cert_chain(certs / "front-proxy-client.crt", certs / "front-proxy-client.key")
    async with httpx.AsyncClient(verify=proxy) as http:
        nobody = await http.get(url, headers={"X-Remote-User": "nobody"})
        admin = await http.get(url, headers={"X-Remote-User": "horae-admin",
                                             "X-Remote-Group": "system:masters"})  # fmt: skip
    assert nobody.status_code == 403, nobody.text
    assert 'User "nobody" cannot list' in nobody.json()["message"]
    assert admin.status_code == 200, admin.text
    assert admin.json()["items"] == []

    stranger = ssl.create_default_context(cafile=str(executions_api.cert.ca_file))
    async with httpx.AsyncClient(verify=stranger) as http:
        with pytest.raises(httpx.TransportError):
            await http.get(url, headers={"X-Remote-User": "horae-admin",
                                         "X-Remote-Group": "system:masters"})  # fmt: skip

"""The aggregation layer's front-proxy settings, as the API server publishes them for
extension API servers: the ConfigMap `kube-system/extension-apiserver-authentication`
(the request-header client CA, the client certificate names it may carry, and the headers
that name the user), read with the Role `extension-apiserver-authentication-reader`."""

from __future__ import annotations

import json
from dataclasses import dataclass

from kubernetes import client

from horae.errors import ConfigError
from horae.kube.calling import call

NAMESPACE = "kube-system"
NAME = "extension-apiserver-authentication"


@dataclass(frozen=True)
class FrontProxy:
    ca_pem: str
    """PEM of the CA that signs the front proxy's client certificate."""
    allowed_names: tuple[str, ...]
    """Common names the front proxy's certificate may carry (empty: any the CA signed)."""
    username_headers: tuple[str, ...]
    group_headers: tuple[str, ...]
    extra_prefixes: tuple[str, ...]


def _list(data: dict[str, str], key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    raw = data.get(key)
    if not raw:
        return default
    value = json.loads(raw)
    return tuple(str(v) for v in value) if isinstance(value, list) else default


async def front_proxy(api: client.ApiClient, *, ca_pem: str | None = None) -> FrontProxy:
    """The cluster's front-proxy settings; `ca_pem` replaces the CA it publishes.
    ConfigError when the API server runs no aggregation layer (no request-header CA)."""
    found = await call(
        client.CoreV1Api(api).read_namespaced_config_map, NAME, NAMESPACE, missing_ok=True
    )
    data: dict[str, str] = dict(found.data or {}) if found is not None else {}
    ca = ca_pem or data.get("requestheader-client-ca-file")
    if not ca:
        raise ConfigError(
            f"ConfigMap {NAMESPACE}/{NAME} has no requestheader-client-ca-file: the API server"
            " runs without the aggregation layer's --requestheader-client-ca-file"
        )
    return FrontProxy(
        ca_pem=ca,
        allowed_names=_list(data, "requestheader-allowed-names", ()),
        username_headers=_list(data, "requestheader-username-headers", ("X-Remote-User",)),
        group_headers=_list(data, "requestheader-group-headers", ("X-Remote-Group",)),
        extra_prefixes=_list(data, "requestheader-extra-headers-prefix", ("X-Remote-Extra-",)),
    )

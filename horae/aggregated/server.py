"""`horae aggregated-api`: the executions API behind the cluster's aggregation layer.

HTTPS only, with a client certificate required: the request-header CA the API server
publishes (front_proxy) verifies it in the handshake, so only the aggregation layer (or
another holder of a front-proxy certificate) reaches the handlers; the certificate's common
name is handed to the app in the ASGI scope (`horae.client_cn`) and checked against the
allowed names there. Probes and metrics are served on HORAE_METRICS_PORT in plain HTTP, as
every component's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import tempfile
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from horae.aggregated.app import ExecutionsView, ViewSettings, application
from horae.aggregated.auth import Authorizer
from horae.config import Settings, env_seconds
from horae.errors import ConfigError
from horae.kube import Reviews, front_proxy, load_api_client
from horae.probes import Probes
from horae.store.groups import Store

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class ServerSettings:
    host: str = "0.0.0.0"
    """HORAE_AGGREGATED_HOST: the address to listen on."""
    port: int = 8443
    """HORAE_AGGREGATED_PORT: the HTTPS port the aggregation layer calls."""
    cert_file: str
    """HORAE_TLS_CERT_FILE: the serving certificate (PEM), for <service>.<namespace>.svc."""
    key_file: str
    """HORAE_TLS_KEY_FILE: its private key (PEM)."""
    requestheader_ca_file: str | None = None
    """HORAE_REQUESTHEADER_CA_FILE: the front proxy's CA, instead of the one the API server
    publishes in kube-system/extension-apiserver-authentication."""
    view: ViewSettings = field(default_factory=ViewSettings)

    @classmethod
    def from_env(cls, env: MutableMapping[str, str] | None = None) -> ServerSettings:
        env = os.environ if env is None else env
        missing = [n for n in ("HORAE_TLS_CERT_FILE", "HORAE_TLS_KEY_FILE") if not env.get(n)]
        if missing:
            raise ConfigError(f"{', '.join(missing)}: required (the serving certificate, PEM)")
        for name in ("HORAE_TLS_CERT_FILE", "HORAE_TLS_KEY_FILE", "HORAE_REQUESTHEADER_CA_FILE"):
            if env.get(name) and not Path(env[name]).is_file():
                raise ConfigError(f"{name}: no such file: {env[name]}")
        raw_port = env.get("HORAE_AGGREGATED_PORT", "8443")
        if not raw_port.isdigit() or not 1 <= int(raw_port) <= 65535:
            raise ConfigError(f"HORAE_AGGREGATED_PORT: expected a port 1-65535, got {raw_port!r}")
        ttl: timedelta = env_seconds(env, "HORAE_CONTINUE_TTL_SECONDS", 900)
        return cls(
            host=env.get("HORAE_AGGREGATED_HOST", "0.0.0.0"),
            port=int(raw_port),
            cert_file=env["HORAE_TLS_CERT_FILE"],
            key_file=env["HORAE_TLS_KEY_FILE"],
            requestheader_ca_file=env.get("HORAE_REQUESTHEADER_CA_FILE") or None,
            view=ViewSettings(continue_ttl=ttl),
        )


class _WithClientName:
    """The app, with the connection's client certificate common name in each scope."""

    def __init__(self, app: ASGIApp, client_cn: str | None) -> None:
        self._app = app
        self._cn = client_cn

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        scope["horae.client_cn"] = self._cn
        await self._app(scope, receive, send)


def _common_name(transport: asyncio.BaseTransport) -> str | None:
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class ClientCertProtocol(H11Protocol):
    """uvicorn's h11 protocol, telling the app whose certificate the connection presented
    (uvicorn hands the app no TLS details)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.app = _WithClientName(self.app, _common_name(transport))


async def run(settings: Settings, server: ServerSettings) -> None:
    probes = Probes(stall_after=settings.liveness_stall.total_seconds())
    probes.serve(settings.metrics_port)
    beat = asyncio.create_task(probes.beat())
    api = load_api_client(settings.kube.kubeconfig)
    ca_pem = None
    if server.requestheader_ca_file:
        ca_pem = await asyncio.to_thread(Path(server.requestheader_ca_file).read_text)
    proxy = await front_proxy(api, ca_pem=ca_pem)
    store = await Store.open(settings.database.url, size=settings.database.pool_size)
    follow = asyncio.create_task(store.follow(asyncio.Event()), name="follow-catalog")
    view = ExecutionsView(store, proxy, Authorizer(Reviews(api)), server.view)
    with tempfile.NamedTemporaryFile("w", suffix=".pem", prefix="horae-requestheader-") as ca:
        ca.write(proxy.ca_pem)
        ca.flush()
        config = uvicorn.Config(
            application(view),
            host=server.host,
            port=server.port,
            ssl_certfile=server.cert_file,
            ssl_keyfile=server.key_file,
            ssl_ca_certs=ca.name,
            ssl_cert_reqs=ssl.CERT_REQUIRED,
            http=ClientCertProtocol,
            lifespan="off",
            timeout_graceful_shutdown=5,  # a watch streams until its client goes
            log_level="warning",
            access_log=False,
        )
        web = uvicorn.Server(config)
        log.info(
            "serving executions",
            extra={
                "port": server.port,
                "groups": store.groups(),
                "allowed_names": list(proxy.allowed_names),
            },
        )
        probes.ready("serving")
        try:
            await web.serve()
        finally:
            probes.unready("stopping")
            follow.cancel()
            beat.cancel()
            await asyncio.gather(follow, beat, return_exceptions=True)
            await store.close()
            api.close()

"""How every adapter in `horae.kube` calls the API server: one client, one call helper.

The official `kubernetes` client is synchronous: `call` runs each request in a worker
thread, so the components' event loops never block on the API server, with a request
timeout from the constants below and 404 read as "gone" where the caller allows it.
There are no retries here: a failed call fails, and the caller's own loop (the next Lease
renewal, kopf's handler retries, the autoscaler's next period) is what tries again.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

REQUEST_TIMEOUT = 10
"""Seconds one request may take (connect and read): reads and writes of one object, Lease
lists, reviews, Events. Default 10."""

LIST_TIMEOUT = 30
"""Seconds a list (or delete) of a namespace's custom objects may take: a job's Execution
mirrors. Default 30."""

CLUSTER_LIST_TIMEOUT = 60
"""Seconds a list of every custom object of a kind in the cluster may take (the resync
pass). Default 60."""

WATCH_SECONDS = 30
"""Seconds the API server keeps one watch open before ending it (`timeoutSeconds`); the
watch is then re-opened. Default 30."""

WATCH_TIMEOUT = 40
"""Seconds a watch's connection may stay silent before the client gives up on it: longer
than `WATCH_SECONDS`, so only a hung connection trips it. Default 40."""


def load_api_client(kubeconfig: str | None, *, connections: int = 32) -> client.ApiClient:
    """An API client from a kubeconfig path, else from the in-cluster service account.

    `connections` sizes the HTTP connection pool: Lease renewals run concurrently.
    """
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration)


async def call(
    method: Callable[..., Any],
    *args: Any,
    timeout: int = REQUEST_TIMEOUT,
    missing_ok: bool = False,
    as_json: bool = False,
    **kwargs: Any,
) -> Any:
    """`method(*args, **kwargs)` on a worker thread, with a request timeout of `timeout`
    seconds (an int: the client ignores a float, and the request would never time out).

    `missing_ok`: None when the API server answers 404 (no such object) instead of raising.
    `as_json`: the response body as parsed JSON rather than the client's model objects.
    Any other API error propagates as `ApiException`, for the adapter to translate.
    """
    try:
        return await asyncio.to_thread(
            _request, method, args, {**kwargs, "_request_timeout": timeout}, as_json
        )
    except ApiException as exc:
        if missing_ok and exc.status == 404:
            return None
        raise


def _request(
    method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], as_json: bool
) -> Any:
    """In the worker thread. A JSON body is read here, in the calling thread, so the
    connection is back in the pool before the thread takes its next call: read later, by
    the event loop, the pool held more connections than threads and discarded the surplus.
    """
    if not as_json:
        return method(*args, **kwargs)
    return json.loads(method(*args, _preload_content=False, **kwargs).data)


def timestamp() -> str:
    """Now, as the API server writes a MicroTime (`2026-12-01T18:30:00.000000Z`)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

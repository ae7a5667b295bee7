"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import pytest_asyncio

from horae import broker
from tests.support.aggregated import (  # fixtures, used by name
    aggregated_api_kubeconfig,
    aggregated_serving_cert,
    executions_api,
)
from tests.support.processes import Processes

__all__ = ["aggregated_api_kubeconfig", "aggregated_serving_cert", "executions_api",
           "shared_default_pool"]  # fmt: skip

TENANTS = ("t", "limited", "free")
"""The tenants the worker tests create jobs for (rather than the test's namespace)."""


@pytest_asyncio.fixture
async def shared_default_pool(
    processes: Processes, broker_url: str, broker_prefix: str, namespace: str
) -> str:
    """Workers of the pool `default` of the test's namespace (which stands in for Horae's
    own) serving `TENANTS`, as the operator sets up a shared pool given `spec.tenants`.
    Its queue exists before anything is published, as a deployed pool's does once its
    workers first ran: what is published before a worker binds its tasks waits there.
    Its value is the queue's name."""
    processes.env["HORAE_TENANTS"] = ",".join(TENANTS)
    connection = await broker.connect(broker_url)
    try:
        channel = await connection.channel()
        names = broker.Names(broker_prefix)
        queue = await broker.bind_pool(
            channel, names, namespace=namespace, pool="default", tenants=TENANTS, tasks=()
        )
    finally:
        await connection.close()
    return queue.name

"""`horae operator`: kopf handlers plus the store -> status mirror, in one event loop."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from horae.config import Settings
from horae.kube import CustomObjects, Events, load_api_client
from horae.operator import scheduledjob
from horae.operator.executions import ExecutionMirrors
from horae.operator.status import StatusMirror
from horae.store.db import connect_pool

log = logging.getLogger(__name__)


def build_registry() -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.persistence.finalizer = "horae.dev/finalizer"
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="horae.dev")
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix="horae.dev", key="last-handled-configuration"
        )
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    scheduledjob.register(registry)
    return registry


async def run(settings: Settings) -> None:
    pool = await connect_pool(settings.database.url, size=settings.database.pool_size)
    api = load_api_client(settings.kube.kubeconfig)
    objects = CustomObjects(api)
    mirrors = ExecutionMirrors(pool, objects)
    mirror = StatusMirror(settings.database.url, pool, objects, Events(api), mirrors)
    memo = kopf.Memo(pool=pool, shards=settings.scheduler.shards, mirrors=mirrors)
    mirror_task = asyncio.create_task(mirror.run(), name="status-mirror")
    try:
        await kopf.operator(registry=build_registry(), clusterwide=True, standalone=True, memo=memo)
    finally:
        mirror_task.cancel()
        await asyncio.gather(mirror_task, return_exceptions=True)
        await pool.close()
        api.close()

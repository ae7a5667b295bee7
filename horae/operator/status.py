"""Store changes -> ScheduledJob status and Execution mirrors, driven by NOTIFY
`horae_job_events`, batched.

Workers and the store notify the job id whenever an execution of a job
changes; this loop coalesces the ids for a short interval and patches each
CRD job's status once, so a busy job does not flood the API server.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from horae.kube import CustomObjects, Events
from horae.operator.executions import ExecutionMirrors
from horae.operator.scheduledjob import conditions_of, status_of
from horae.store import reads
from horae.store.db import Database, Listener
from horae.store.rows import JobRow

log = logging.getLogger(__name__)

BATCH_INTERVAL = 0.25


class StatusMirror:
    def __init__(
        self,
        dsn: str,
        pool: Database,
        objects: CustomObjects,
        events: Events | None = None,
        mirrors: ExecutionMirrors | None = None,
    ) -> None:
        self._dsn = dsn
        self._pool = pool
        self._objects = objects
        self._events = events
        self._mirrors = mirrors
        self._dead_seen: dict[uuid.UUID, object] = {}
        self._pending: set[uuid.UUID] = set()
        self._wake = asyncio.Event()

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        try:
            self._pending.add(uuid.UUID(str(payload)))
        except ValueError:
            return
        self._wake.set()

    async def run(self) -> None:
        while True:
            try:
                listener = Listener(self._dsn)
                await listener.open()
                try:
                    await listener.listen("horae_job_events", self._on_notify)
                    while not listener.closed():
                        try:  # (no wait_for: its task would hold kopf's shutdown up)
                            async with asyncio.timeout(5):
                                await self._wake.wait()
                        except TimeoutError:
                            continue
                        await asyncio.sleep(BATCH_INTERVAL)
                        self._wake.clear()
                        await self.flush()
                finally:
                    await listener.close()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("status mirror failed; reconnecting")
                await asyncio.sleep(1)

    async def flush(self) -> None:
        ids, self._pending = self._pending, set()
        for job_id in ids:
            async with self._pool.acquire() as conn:
                row = await reads.find_job(conn, job_id)
            if row is None or row.source != "crd" or row.state == "cancelled" or not row.name:
                continue  # (a ScheduledJob's job is always named: jobs_crd_named)
            present = await self._objects.patch_status(
                "scheduledjobs",
                row.tenant,
                row.name,
                status_of(row) | {"conditions": conditions_of(row)},
            )
            if present and self._mirrors is not None:
                try:
                    await self._mirrors.sync(row)
                except Exception:
                    log.exception("could not mirror the executions of %s/%s", row.tenant, row.name)
            if row.last_status == "dead" and self._dead_seen.get(job_id) != row.last_run_at:
                self._dead_seen[job_id] = row.last_run_at
                await self._alert_dead(row)

    async def _alert_dead(self, row: JobRow) -> None:
        """A Warning Event on the ScheduledJob: its last attempt failed and was dead-lettered."""
        if self._events is None:
            return
        try:
            await self._events.emit(
                kind="ScheduledJob",
                namespace=row.tenant,
                name=row.name or "",
                uid=str(row.id),
                reason="ExecutionDead",
                message=f"task {row.task}: the last attempt failed; the execution was "
                "dead-lettered (see `horae executions " + f"{row.tenant}/{row.name}`)",
            )
        except Exception:
            log.exception("could not post the ExecutionDead event")

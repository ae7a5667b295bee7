"""Store changes -> ScheduledJob status and Execution mirrors, driven by NOTIFY
`horae_job_events`, batched.

Workers and the store notify the job id whenever an execution of a job
changes; this loop coalesces the ids for a short interval and patches each
CRD job's status once, so a busy job does not flood the API server. A NOTIFY is
delivered only to listeners of the database it was sent in, so there is one listener
per store group (and one more for a group added later).

A status whose change is only its times (last and next run, last schedule and success,
the count of consecutive failures) is written at most once per `status_every` (10 s,
HORAE_STATUS_INTERVAL_SECONDS) per job: 100 jobs firing every 2 s made 25 status writes a
second otherwise. A change of what the status says (its conditions, the last outcome, a
pause, an edit) is written at once. (With the opt-in Execution mirror, every change is
written at once, as the mirror follows the same pass.)
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Any

from horae import metrics
from horae.errors import ObjectChanged
from horae.kube import CustomObjects, Events
from horae.operator.conditions import Condition
from horae.operator.executions import ExecutionMirrors
from horae.operator.measuring import failed
from horae.operator.reporting import StatusWriter
from horae.operator.scheduledjob import (
    RESUME_HINT,
    TOO_MANY_FAILURES,
    conditions_of,
    stored_status,
)
from horae.store import routing
from horae.store.db import Listener
from horae.store.groups import Store, group_url
from horae.store.rows import JobRow

log = logging.getLogger(__name__)

BATCH_INTERVAL = 0.25
STATUS_EVERY = 10.0
"""Seconds: the most often a job's status is written when only its times changed."""


class StatusMirror:
    def __init__(
        self,
        dsn: str,
        store: Store,
        objects: CustomObjects,
        events: Events | None = None,
        mirrors: ExecutionMirrors | None = None,
        *,
        status_every: float = STATUS_EVERY,
    ) -> None:
        self._dsn = dsn
        self._store = store
        self._listeners: dict[str, asyncio.Task[None]] = {}
        self._objects = objects
        self.writer = StatusWriter(objects, "scheduledjobs")
        """Writes the statuses (the resync pass writes through it too)."""
        self._events = events
        self._mirrors = mirrors
        self._dead_seen: dict[uuid.UUID, object] = {}
        self._pauses_seen: dict[uuid.UUID, object] = {}
        """Per job, when its failure policy last paused it, as announced by an Event."""
        self._pending: dict[uuid.UUID, float] = {}
        """Job ids notified, with when (monotonic) the first notification since the last
        flush came: the mirror lag is counted from then."""
        self._wake = asyncio.Event()
        self._every = 0.0 if mirrors is not None and mirrors.enabled else status_every
        self._written: dict[uuid.UUID, tuple[float, str]] = {}
        """Per job, when (monotonic) its status was last written, and what it said apart
        from its times."""
        self._held: dict[uuid.UUID, float] = {}
        """Jobs whose times changed within `_every` of their last write, with when they were
        first notified: written once it passed."""

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        try:
            self._pending.setdefault(uuid.UUID(str(payload)), time.monotonic())
        except ValueError:
            return
        self._wake.set()

    def listen(self) -> None:
        """LISTEN in every store group now. Called before kopf starts: kopf's shutdown
        waits for the tasks created after it started (a listener's included, through its
        pings), which held a clean stop's handover up by 5 s."""
        for group in self._store.groups():
            if group not in self._listeners or self._listeners[group].done():
                self._listeners[group] = asyncio.create_task(
                    self._listen(group), name=f"job-events-{group}"
                )

    async def run(self) -> None:
        listeners = self._listeners
        try:
            while True:
                self.listen()  # a group added since
                try:  # (no wait_for: its task would hold kopf's shutdown up)
                    async with asyncio.timeout(self._until_release()):
                        await self._wake.wait()
                except TimeoutError:
                    if not self._release():
                        continue
                await asyncio.sleep(BATCH_INTERVAL)
                self._wake.clear()
                self._release()
                try:
                    await self.flush()
                except Exception:
                    failed("status-mirror")
                    log.exception("status mirror failed to flush; going on")
        finally:
            for task in listeners.values():
                task.cancel()
            await asyncio.gather(*listeners.values(), return_exceptions=True)

    async def _listen(self, group: str) -> None:
        """LISTEN horae_job_events in one store group, reconnecting when the connection
        is lost."""
        while True:
            try:
                address = self._store.catalog.addresses[group]
                listener = Listener(group_url(group, address, self._dsn))
                await listener.open()
                try:
                    await listener.listen("horae_job_events", self._on_notify)
                    while True:  # a ping notices a connection that died quietly
                        await asyncio.sleep(5)
                        await listener.ping()
                finally:
                    await listener.close()
            except asyncio.CancelledError:
                raise
            except Exception:
                failed("status-mirror")
                log.exception("status mirror lost group %s; reconnecting", group)
                await asyncio.sleep(1)

    def _until_release(self) -> float:
        """Seconds until the first held job may be written (5 at most)."""
        if not self._held:
            return 5.0
        now = time.monotonic()
        first = min(
            (self._written[j][0] + self._every for j in self._held if j in self._written),
            default=now,
        )
        return max(0.0, min(5.0, first - now))

    def _release(self) -> bool:
        """Move the held jobs whose interval passed to the pending ones; whether any was."""
        now = time.monotonic()
        due = [
            j for j in self._held
            if j not in self._written or self._written[j][0] + self._every <= now
        ]  # fmt: skip
        for job_id in due:
            self._pending.setdefault(job_id, self._held.pop(job_id))
        return bool(due)

    async def flush(self) -> None:
        ids, self._pending = self._pending, {}
        for job_id, notified in ids.items():
            row = await routing.find_job(self._store, job_id)
            if row is None or row.source != "crd" or row.state == "cancelled" or not row.name:
                continue  # (a ScheduledJob's job is always named: jobs_crd_named)
            fields = await stored_status(self._store, row)
            conditions = conditions_of(row)
            said = _saying(row, fields, conditions)
            last = self._written.get(job_id)
            if last is not None and last[1] == said and time.monotonic() - last[0] < self._every:
                self._held.setdefault(job_id, notified)
                continue
            self._held.pop(job_id, None)
            try:
                present = await self.writer.write(
                    row.tenant, row.name, str(row.id), fields, conditions
                )
            except ObjectChanged as exc:
                log.info("%s: written at the next flush", exc)
                self._pending.setdefault(job_id, notified)
                self._wake.set()
                continue
            if present:
                self._written[job_id] = (time.monotonic(), said)
            else:
                self._written.pop(job_id, None)
            if present and self._mirrors is not None:
                try:
                    await self._mirrors.sync(row)
                except Exception:
                    failed("execution-mirrors")
                    log.exception("could not mirror the executions of %s/%s", row.tenant, row.name)
            if present:
                metrics.mirror_lag.observe(time.monotonic() - notified)
            if row.last_status == "dead" and self._dead_seen.get(job_id) != row.last_run_at:
                self._dead_seen[job_id] = row.last_run_at
                await self._alert_dead(row)
            if (
                row.state == "paused"
                and row.paused_for_failures
                and self._pauses_seen.get(job_id) != row.paused_at
            ):
                self._pauses_seen[job_id] = row.paused_at
                await self._alert_paused(row)

    async def _alert_paused(self, row: JobRow) -> None:
        """A Warning Event on the ScheduledJob: its failure policy paused it, and why."""
        reason = row.paused_reason or "paused after consecutive failures"
        await self._warn(row, TOO_MANY_FAILURES, f"{reason}; {RESUME_HINT}")

    async def _alert_dead(self, row: JobRow) -> None:
        """A Warning Event on the ScheduledJob: its last attempt failed and was dead-lettered."""
        await self._warn(
            row,
            "ExecutionDead",
            f"task {row.task}: the last attempt failed; the execution was dead-lettered"
            f" (see `horae executions {row.tenant}/{row.name}`)",
        )

    async def _warn(self, row: JobRow, reason: str, message: str) -> None:
        """A Warning Event on the job's ScheduledJob (none without an Events client)."""
        if self._events is None:
            return
        try:
            await self._events.emit(
                kind="ScheduledJob",
                namespace=row.tenant,
                name=row.name or "",
                uid=str(row.id),
                reason=reason,
                message=message,
            )
        except Exception:
            failed("status-mirror")
            log.exception("could not post the %s event", reason)


_TIMES = ("nextRunAt", "lastRunAt", "lastScheduleTime", "lastSuccessfulTime", "consecutiveFailures")


def _saying(row: JobRow, fields: dict[str, Any], conditions: list[Condition]) -> str:
    """What a status says apart from its times: a change of it is written at once."""
    return json.dumps(
        [
            {k: v for k, v in fields.items() if k not in _TIMES},
            [(c.type, c.status, c.reason, c.message) for c in conditions],
            row.state,
            row.spec_version,
        ],
        sort_keys=True,
        default=str,
    )

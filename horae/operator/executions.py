"""Execution mirrors, opt-in (HORAE_EXECUTION_MIRROR=1): a ScheduledJob's recent executions
as `Execution` resources of horae.dev, written into etcd, for clusters that cannot run
Horae's aggregated API (horae/aggregated, group runs.horae.dev, which serves every
execution from the store and is how `kubectl get executions` works by default).

With the mirror, `kubectl get executions.horae.dev -n NS` shows what ran, when and how it
ended, without access to Postgres, which keeps the full history. Its limit: one writer of
20 writes a second for the whole cluster, two or three writes per execution, so it falls
behind past a few executions a second (docs/operations.md). Each mirror is
owned by its ScheduledJob (ownerReference: garbage-collected with it) and labelled
with the job's name; a job keeps its `historyLimit` newest mirrors, or, with a CronJob's
limits, its `successfulJobsHistoryLimit` newest Succeeded ones and `failedJobsHistoryLimit`
newest that ended otherwise, and every queued or running one (`resources.History`). Writes
go through one rate limiter, so a busy namespace cannot flood the API server, and a mirror
is written only when what it shows changed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Any

from horae.domain.instants import rfc3339
from horae.kube import CustomObjects
from horae.resources import GROUP, MIRRORED_ERROR_CHARS, MIRRORED_RESULT_CHARS, VERSION, History
from horae.store import routing
from horae.store.groups import Store
from horae.store.rows import ExecutionRow, JobRow

log = logging.getLogger(__name__)

JOB_LABEL = f"{GROUP}/job"


class RateLimiter:
    """At most `rate` acquisitions a second on average, in bursts of up to `rate`."""

    def __init__(self, rate: float) -> None:
        self._rate = rate
        self._tokens = rate
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self._lock:
            while True:
                now = time.monotonic()
                self._tokens = min(self._rate, self._tokens + (now - self._stamp) * self._rate)
                self._stamp = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    return
                await asyncio.sleep((1 - self._tokens) / self._rate)


def _display(status: str) -> str:
    return "".join(part.capitalize() for part in status.split("_"))


def mirror_name(job_name: str, execution_id: uuid.UUID) -> str:
    return f"{job_name}-{execution_id.hex[:12]}"


def mirror_status(row: ExecutionRow) -> dict[str, Any]:
    """What an Execution resource shows of one execution row."""
    duration = None
    if row.started_at and row.finished_at:
        duration = f"{(row.finished_at - row.started_at).total_seconds():.3f}s"
    error = None
    if row.error_kind:
        error = f"{row.error_kind}: {row.error_message or ''}".strip()
        if len(error) > MIRRORED_ERROR_CHARS:
            error = error[: MIRRORED_ERROR_CHARS - 1] + "…"
    result, cut = _mirrored_result(row.result)
    return {
        "executionId": str(row.id),
        "jobId": str(row.job_id),
        "attempt": row.attempt,
        "status": _display(row.status),
        "occurrenceAt": rfc3339(row.occurrence_at),
        "dueAt": rfc3339(row.due_at),
        "startedAt": rfc3339(row.started_at),
        "finishedAt": rfc3339(row.finished_at),
        "duration": duration,
        "error": error,
        "result": result,
        "resultTruncated": cut,
        "manual": row.manual,
    }


def _mirrored_result(value: Any) -> tuple[str | None, bool]:
    """A result as compact JSON cut to MIRRORED_RESULT_CHARS (ending in `…`), and whether
    it was cut."""
    if value is None:
        return None, False
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if len(text) <= MIRRORED_RESULT_CHARS:
        return text, False
    return text[: MIRRORED_RESULT_CHARS - 1] + "…", True


def _signature(status: dict[str, Any]) -> str:
    return json.dumps(status, sort_keys=True)


class ExecutionMirrors:
    def __init__(
        self,
        store: Store,
        objects: CustomObjects,
        *,
        writes_per_second: float = 20.0,
        enabled: bool = True,
    ) -> None:
        """`enabled` False (the default of the operator, HORAE_EXECUTION_MIRROR unset): no
        mirror is written or deleted; `kubectl get executions` reads the store instead."""
        self.enabled = enabled
        self._store = store
        self._objects = objects
        self._limiter = RateLimiter(writes_per_second)
        self.history: dict[uuid.UUID, History] = {}
        """Each ScheduledJob's history limits, kept up to date by its reconcile handler."""
        self._known: dict[uuid.UUID, dict[str, str]] = {}

    async def _existing(self, namespace: str, job_name: str) -> dict[str, str]:
        items = await self._objects.list(
            "executions", namespace, label_selector=f"{JOB_LABEL}={job_name}"
        )
        return {i["metadata"]["name"]: _signature(i.get("status") or {}) for i in items}

    async def sync(self, job: JobRow) -> None:
        """Make the job's Execution resources show its newest dispatched executions."""
        if not self.enabled:
            return
        job_id, namespace, job_name = job.id, job.tenant, job.name
        assert job_name is not None, "a ScheduledJob's job is named (jobs_crd_named)"
        rows = await self._wanted(job_id, self.history.get(job_id, History()))
        known = self._known.get(job_id)
        if known is None:
            known = self._known[job_id] = await self._existing(namespace, job_name)
        wanted = {mirror_name(job_name, r.id): mirror_status(r) for r in rows}
        for name, status in wanted.items():
            signature = _signature(status)
            if known.get(name) == signature:
                continue
            await self._limiter.acquire()
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Execution",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {JOB_LABEL: job_name},
                    "ownerReferences": [
                        {
                            "apiVersion": f"{GROUP}/{VERSION}",
                            "kind": "ScheduledJob",
                            "name": job_name,
                            "uid": str(job_id),
                            "controller": True,
                            "blockOwnerDeletion": False,
                        }
                    ],
                },
                "status": status,
            }
            await self._objects.upsert("executions", namespace, name, body)
            known[name] = signature
        for name in sorted(set(known) - set(wanted)):
            await self._limiter.acquire()
            await self._objects.delete("executions", namespace, name)
            del known[name]

    async def _wanted(self, job_id: uuid.UUID, history: History) -> list[ExecutionRow]:
        """The executions `history` keeps, from every store group (history stays in a group
        the job's shard left)."""
        if history.newest is not None:
            if not history.newest:
                return []
            return await routing.recent_of_job(self._store, job_id, history.newest)
        return await routing.recent_of_job_by_outcome(
            self._store, job_id, succeeded=history.succeeded, failed=history.failed
        )

    async def forget(self, job_id: uuid.UUID, namespace: str, job_name: str) -> None:
        """The ScheduledJob is going: delete its mirrors (what garbage collection would do)."""
        if not self.enabled:
            return
        self._known.pop(job_id, None)
        self.history.pop(job_id, None)
        await self._objects.delete_all(
            "executions", namespace, label_selector=f"{JOB_LABEL}={job_name}"
        )

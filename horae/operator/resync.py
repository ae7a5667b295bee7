"""The resync pass: heal drift between ScheduledJobs and the store that no watch event
announces (a store restored from an older backup, a resource removed while its finalizer
was stripped or the operator was down).

Every `period`: a resource whose job is missing from the store gets it (the job id is the
resource's uid, so this is the same idempotent upsert as a reconcile); a live store job
whose resource is gone is cancelled and its Execution mirrors deleted. A job is judged
orphaned only after a direct GET confirms its resource is gone, so a resource created
while the pass runs is never mistaken for a deleted one.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import pydantic

from horae.errors import QuotaExceeded
from horae.kube import CustomObjects
from horae.operator.conditions import generation_of
from horae.operator.executions import ExecutionMirrors
from horae.operator.measuring import failed
from horae.operator.reporting import StatusWriter
from horae.operator.scheduledjob import cancel, conditions_of, stored_status, sync_job
from horae.resources import TRIGGER_ANNOTATION, ScheduledJobSpec
from horae.store import routing
from horae.store.groups import Store

log = logging.getLogger(__name__)


class Resync:
    def __init__(
        self,
        store: Store,
        objects: CustomObjects,
        mirrors: ExecutionMirrors,
        *,
        period: float,
        writer: StatusWriter | None = None,
    ) -> None:
        self._groups = store
        self._objects = objects
        self._mirrors = mirrors
        self._writer = writer or StatusWriter(objects, "scheduledjobs")
        self._period = period

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._period)
            try:
                stored, cancelled = await self.once()
                if stored or cancelled:
                    log.warning(
                        "resync: %d jobs restored to the store, %d orphans cancelled",
                        stored,
                        cancelled,
                    )
            except asyncio.CancelledError:
                raise
            except Exception:
                failed("resync")
                log.exception("resync pass failed")

    async def once(self) -> tuple[int, int]:
        """One pass; returns (jobs stored again, orphaned jobs cancelled)."""
        resources = await self._objects.list_all("scheduledjobs")
        live = {
            uuid.UUID(r["metadata"]["uid"]): r
            for r in resources
            if not r["metadata"].get("deletionTimestamp")
        }
        # Every store group's: jobs live in the group of their shard.
        jobs = await routing.live_crd_jobs(self._groups)
        known = await routing.existing_ids(self._groups, list(live))
        stored = 0
        for uid in sorted(set(live) - known):
            meta = live[uid]["metadata"]
            # One resource that cannot be stored, whatever the reason, must not stop the
            # pass for every other tenant's: it is logged and tried again next pass.
            try:
                stored += await self._store(uid, live[uid])
            except Exception:
                failed("resync")
                log.exception(
                    "resync: ScheduledJob %s/%s not stored", meta["namespace"], meta["name"]
                )
        cancelled = 0
        for job_id in sorted(set(jobs) - set(live)):
            job = jobs[job_id]
            try:
                cancelled += await self._cancel_orphan(job_id, job.tenant, job.name)
            except Exception:
                failed("resync")
                log.exception("resync: job %s not cancelled", job_id)
        return stored, cancelled

    async def _cancel_orphan(self, job_id: uuid.UUID, namespace: str, name: str) -> bool:
        current = await self._objects.get("scheduledjobs", namespace, name)
        if current is not None and current["metadata"]["uid"] == str(job_id):
            return False  # created after the list, or being deleted: kopf handles it
        await cancel(self._groups, job_id)
        await self._mirrors.forget(job_id, namespace, name)
        log.warning("resync: cancelled job %s: ScheduledJob %s/%s is gone", job_id, namespace, name)
        return True

    async def _store(self, uid: uuid.UUID, resource: dict[str, Any]) -> bool:
        meta = resource["metadata"]
        try:
            spec = ScheduledJobSpec.model_validate(resource.get("spec") or {})
            spec.job_spec()
        except pydantic.ValidationError:
            return False  # invalid: its reconcile reported why in its status
        self._mirrors.history[uid] = spec.history()
        value = (meta.get("annotations") or {}).get(TRIGGER_ANNOTATION)
        try:
            row, _ = await sync_job(
                self._groups, uid, meta["namespace"], meta["name"], spec, trigger_value=value
            )
        except QuotaExceeded:
            return False  # its reconcile reports it (Ready=False QuotaExceeded) and retries
        await self._writer.write(
            meta["namespace"],
            meta["name"],
            str(uid),
            await stored_status(self._groups, row),
            conditions_of(row),
            generation=generation_of(meta),
        )
        log.warning(
            "resync: stored job %s for ScheduledJob %s/%s, missing from the store",
            uid,
            meta["namespace"],
            meta["name"],
        )
        return True

"""ScheduledJob reconciliation: create/update/resume upsert the job; delete cancels it.

The job's id is the resource's uid, so every reconcile is an idempotent upsert
and a resource recreated under the same name is a new job. The operator writes
only status, its finalizer and its own annotations: never spec.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

import kopf
import pydantic
from pydantic.alias_generators import to_camel

from horae.clock import utc_now
from horae.domain.fields import first_error
from horae.domain.instants import rfc3339
from horae.errors import QuotaExceeded
from horae.models import JobSource
from horae.operator.conditions import condition, refuse
from horae.operator.measuring import measured
from horae.resources import GROUP, VERSION, ScheduledJobSpec
from horae.store import jobs, quotas, routing
from horae.store.new_jobs import NewJob

if TYPE_CHECKING:
    from horae.store.groups import Store
    from horae.store.rows import JobRow

log = logging.getLogger(__name__)


QUOTA_RETRY_SECONDS = 15
"""A ScheduledJob refused for its tenant's quota is tried again this often."""

_RENAMED = {"cron": "schedule", "retry": "retryPolicy"}
"""JobSpec fields whose ScheduledJob name differs beyond camelCase."""


def _crd_field(part: object) -> str:
    """A JobSpec error location part as the ScheduledJob manifest spells it."""
    text = str(part)
    return _RENAMED.get(text) or to_camel(text)


def display_status(status: str | None) -> str | None:
    """`timed_out` -> `TimedOut`: how statuses read in kubectl columns."""
    return "".join(p.capitalize() for p in status.split("_")) if status else None


def status_of(row: JobRow) -> dict[str, Any]:
    """The status fields that come from the store's job row."""
    return {
        "jobId": str(row.id),
        "nextRunAt": rfc3339(row.next_run_at),
        "lastRunAt": rfc3339(row.last_run_at),
        "lastStatus": display_status(row.last_status),
    }


FAILING = frozenset({"failed", "dead", "timed_out"})


def conditions_of(row: JobRow) -> list[dict[str, str]]:
    """Ready, Suspended and Failing, from the stored job."""
    paused = row.state == "paused"
    failing = row.last_status in FAILING
    return [
        condition("Ready", True, "Stored", "job stored"),
        condition("Suspended", paused, "Suspend" if paused else "Active"),
        condition(
            "Failing",
            failing,
            display_status(row.last_status) or "NoRuns",
            f"the last attempt ended {row.last_status}" if failing else "",
        ),
    ]


def ready_status(row: JobRow, generation: Any) -> dict[str, Any]:
    """The whole status of a ScheduledJob whose job is stored."""
    return status_of(row) | {"observedGeneration": generation, "conditions": conditions_of(row)}


async def sync_job(
    store: Store,
    uid: uuid.UUID,
    namespace: str,
    name: str,
    spec: ScheduledJobSpec,
) -> JobRow:
    """Make the store's job match the resource (in the store group of the uid's shard);
    returns the job row."""
    job_spec = spec.job_spec()
    now = utc_now()
    row = await routing.find_job(store, uid)
    if row is None:
        await routing.cancel_crd_namesake(store, namespace, name, keep=uid, now=now)
        new = NewJob(
            spec=job_spec,
            tenant=namespace,
            source=JobSource.CRD,
            job_id=uid,
            name=name,
            paused=spec.suspend,
        )
        await routing.create_jobs(store, [new], now=now)
    else:
        if row.spec != job_spec:
            group = store.catalog.group_of(row.shard)
            elsewhere = await quotas.elsewhere(store, group, [namespace])
            await routing.on_job(
                store,
                uid,
                lambda conn: jobs.edit_job(
                    conn, uid, job_spec, now=now, by=JobSource.CRD, elsewhere=elsewhere
                ),
            )
        if spec.suspend != (row.state == "paused"):
            await routing.on_job(
                store, uid, lambda conn: jobs.set_paused(conn, uid, spec.suspend, now=now)
            )
    return await routing.get_job(store, uid)


async def cancel(store: Store, job_id: uuid.UUID) -> bool:
    """Cancel a ScheduledJob's job, in its store group; False if it was cancelled or absent."""
    return await routing.on_job(
        store,
        job_id,
        lambda conn: jobs.cancel_job(conn, job_id, now=utc_now(), by=JobSource.CRD),
        missing=lambda done: not done,
    )


def register(registry: kopf.OperatorRegistry) -> None:
    """Register the ScheduledJob handlers on `registry`."""

    @kopf.on.create(GROUP, VERSION, "scheduledjobs", registry=registry)
    @kopf.on.update(GROUP, VERSION, "scheduledjobs", field="spec", registry=registry)
    @kopf.on.resume(GROUP, VERSION, "scheduledjobs", registry=registry)
    @measured("ScheduledJob")
    async def reconcile(
        spec: kopf.Spec,
        meta: kopf.Meta,
        uid: str,
        namespace: str | None,
        name: str,
        patch: kopf.Patch,
        memo: kopf.Memo,
        **_: Any,
    ) -> None:
        assert namespace is not None, "ScheduledJob is namespaced"
        generation = meta.get("generation")
        try:
            parsed = ScheduledJobSpec.model_validate(dict(spec))
            parsed.job_spec()
        except pydantic.ValidationError as exc:
            error = first_error(exc)
            message = f"{error.path(spell=_crd_field, under='spec')}: {error.message}"
            patch.status["observedGeneration"] = generation
            await refuse(
                memo.events, patch, meta, kind="ScheduledJob", reason="InvalidSpec", message=message
            )
            raise kopf.PermanentError(message) from exc
        memo.mirrors.history_limits[uuid.UUID(uid)] = parsed.history_limit
        try:
            row = await sync_job(memo.store, uuid.UUID(uid), namespace, name, parsed)
        except QuotaExceeded as exc:
            # Not stored (or not changed); tried again, so that it is stored once an
            # administrator raises the quota or the tenant frees some of it.
            patch.status["observedGeneration"] = generation
            await refuse(
                memo.events,
                patch,
                meta,
                kind="ScheduledJob",
                reason="QuotaExceeded",
                message=str(exc),
            )
            raise kopf.TemporaryError(str(exc), delay=QUOTA_RETRY_SECONDS) from exc
        patch.status.update(ready_status(row, generation))

    @kopf.on.delete(GROUP, VERSION, "scheduledjobs", registry=registry)
    @measured("ScheduledJob")
    async def delete(uid: str, namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
        assert namespace is not None, "ScheduledJob is namespaced"
        await cancel(memo.store, uuid.UUID(uid))
        await memo.mirrors.forget(uuid.UUID(uid), namespace, name)

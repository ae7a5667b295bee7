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
from horae.domain.limits import pause_reason_error
from horae.errors import ObjectChanged, QuotaExceeded
from horae.models import JobSource
from horae.operator import trigger
from horae.operator.conditions import Condition, generation_of
from horae.operator.measuring import measured
from horae.operator.reporting import refuse
from horae.resources import (
    GROUP,
    PAUSE_REASON_ANNOTATION,
    TRIGGER_ANNOTATION,
    TRIGGER_MAX_CHARS,
    VERSION,
    ScheduledJobSpec,
)
from horae.store import jobs, quotas, routing
from horae.store.new_jobs import NewJob

if TYPE_CHECKING:
    from datetime import datetime

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


def status_of(
    row: JobRow, last_schedule: datetime | None, last_success: datetime | None
) -> dict[str, Any]:
    """The status fields that come from the store: the job row, and the times of its
    newest dispatched scheduled occurrence and newest success (`routing.job_run_times`)."""
    return {
        "jobId": str(row.id),
        "nextRunAt": rfc3339(row.next_run_at),
        "lastRunAt": rfc3339(row.last_run_at),
        "lastStatus": display_status(row.last_status),
        "lastScheduleTime": rfc3339(last_schedule),
        "lastSuccessfulTime": rfc3339(last_success),
        "pausedReason": row.paused_reason if row.state == "paused" else None,
        "consecutiveFailures": row.consecutive_failures,
    }


async def stored_status(store: Store, row: JobRow) -> dict[str, Any]:
    """`status_of` the stored job, reading its run times (from every store group)."""
    return status_of(row, *await routing.job_run_times(store, row.id))


FAILING = frozenset({"failed", "dead", "timed_out"})


TOO_MANY_FAILURES = "TooManyFailures"
"""The reason of the conditions (and the Event) of a job its failure policy paused."""

RESUME_HINT = "set spec.suspend to true, then to false, to resume it"


def conditions_of(row: JobRow) -> list[Condition]:
    """Ready, Suspended and Failing, from the stored job. A job its failure policy paused is
    not Ready (it does not run as its spec says), and both conditions say why."""
    paused = row.state == "paused"
    failing = row.last_status in FAILING
    if paused and row.paused_for_failures:
        why = f"{row.paused_reason or 'paused after consecutive failures'}; {RESUME_HINT}"
        ready = Condition("Ready", False, TOO_MANY_FAILURES, why)
        suspended = Condition("Suspended", True, TOO_MANY_FAILURES, why)
    else:
        ready = Condition("Ready", True, "Stored", "job stored")
        suspended = Condition(
            "Suspended", paused, "Suspend" if paused else "Active", row.paused_reason or ""
        )
    return [
        ready,
        suspended,
        Condition(
            "Failing",
            failing,
            display_status(row.last_status) or "NoRuns",
            f"the last attempt ended {row.last_status}" if failing else "",
        ),
    ]


async def sync_job(
    store: Store,
    uid: uuid.UUID,
    namespace: str,
    name: str,
    spec: ScheduledJobSpec,
    *,
    trigger_value: str | None = None,
    pause_reason: str | None = None,
) -> tuple[JobRow, bool]:
    """Make the store's job match the resource (in the store group of the uid's shard);
    returns the job row, and whether the job was created just now. A job created records
    `trigger_value` (the resource's `horae.dev/trigger`, if any) as handled: a value a
    ScheduledJob is created with runs nothing, only a new one does. A job suspended records
    `pause_reason` (the checked `horae.dev/pause-reason`).

    A job its failure policy paused stays paused while `spec.suspend` is false: the spec
    said so before the failures too. Setting it true makes the pause the user's (the
    failures' reason kept unless an annotation gives another), and false again resumes."""
    job_spec = spec.job_spec()
    now = utc_now()
    row = await routing.find_job(store, uid)
    created = row is None
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
        if spec.suspend and pause_reason is not None:
            await routing.on_job(
                store,
                uid,
                lambda conn: jobs.set_paused(conn, uid, True, now=now, reason=pause_reason),
            )
        if trigger_value is not None and len(trigger_value) <= TRIGGER_MAX_CHARS:
            await routing.on_job(
                store,
                uid,
                lambda conn: jobs.trigger_once(conn, uid, trigger_value, now=now, run=False),
            )
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
        paused = row.state == "paused"
        if spec.suspend and (not paused or row.paused_for_failures):
            await routing.on_job(
                store,
                uid,
                lambda conn: jobs.set_paused(conn, uid, True, now=now, reason=pause_reason),
            )
        elif not spec.suspend and paused and not row.paused_for_failures:
            await routing.on_job(
                store, uid, lambda conn: jobs.set_paused(conn, uid, False, now=now)
            )
    return await routing.get_job(store, uid), created


async def cancel(store: Store, job_id: uuid.UUID) -> bool:
    """Cancel a ScheduledJob's job, in its store group; False if it was cancelled or absent."""
    return await routing.on_job(
        store,
        job_id,
        lambda conn: jobs.cancel_job(conn, job_id, now=utc_now(), by=JobSource.CRD),
        missing=lambda done: not done,
    )


async def _pause_reason(memo: kopf.Memo, meta: kopf.Meta) -> str | None:
    """The resource's `horae.dev/pause-reason`, if it has one that may be stored; a Warning
    Event PauseReasonRefused says why one may not (the job is suspended all the same)."""
    reason = meta.annotations.get(PAUSE_REASON_ANNOTATION)
    if reason is None:
        return None
    error = "cannot be empty" if not reason else pause_reason_error(reason)
    if error is None:
        return reason
    await memo.events.emit(
        kind="ScheduledJob",
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        reason="PauseReasonRefused",
        message=f"annotation {PAUSE_REASON_ANNOTATION}: {error}; suspended without a reason",
    )
    return None


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
        memo: kopf.Memo,
        **_: Any,
    ) -> None:
        assert namespace is not None, "ScheduledJob is namespaced"
        try:
            parsed = ScheduledJobSpec.model_validate(dict(spec))
            parsed.job_spec()
        except pydantic.ValidationError as exc:
            error = first_error(exc)
            message = f"{error.path(spell=_crd_field, under='spec')}: {error.message}"
            await refuse(
                memo.events,
                memo.job_status,
                meta,
                kind="ScheduledJob",
                reason="InvalidSpec",
                message=message,
            )
            raise kopf.PermanentError(message) from exc
        memo.mirrors.history[uuid.UUID(uid)] = parsed.history()
        value = meta.annotations.get(TRIGGER_ANNOTATION)
        reason = await _pause_reason(memo, meta) if parsed.suspend else None
        try:
            row, created = await sync_job(
                memo.store,
                uuid.UUID(uid),
                namespace,
                name,
                parsed,
                trigger_value=value,
                pause_reason=reason,
            )
        except QuotaExceeded as exc:
            # Not stored (or not changed); tried again, so that it is stored once an
            # administrator raises the quota or the tenant frees some of it.
            await refuse(
                memo.events,
                memo.job_status,
                meta,
                kind="ScheduledJob",
                reason="QuotaExceeded",
                message=str(exc),
            )
            raise kopf.TemporaryError(str(exc), delay=QUOTA_RETRY_SECONDS) from exc
        fields = await stored_status(memo.store, row)
        if created and value is not None and len(value) <= TRIGGER_MAX_CHARS:
            fields["lastTrigger"] = trigger.handled(value, None, utc_now())
        try:
            await memo.job_status.write(
                namespace, name, uid, fields, conditions_of(row), generation=generation_of(meta)
            )
        except ObjectChanged as exc:  # written over and over meanwhile: again soon
            raise kopf.TemporaryError(str(exc), delay=1) from exc

    @kopf.on.event(GROUP, VERSION, "scheduledjobs", when=trigger.pending, registry=registry)
    @measured("ScheduledJob")
    async def run_now(
        meta: kopf.Meta,
        status: kopf.Status,
        uid: str,
        namespace: str | None,
        name: str,
        patch: kopf.Patch,
        memo: kopf.Memo,
        **_: Any,
    ) -> None:
        assert namespace is not None, "ScheduledJob is namespaced"
        value = meta.annotations[TRIGGER_ANNOTATION]
        handled = await trigger.run(memo.store, memo.events, uuid.UUID(uid), namespace, name, value)
        if handled is not None:
            patch.status["lastTrigger"] = handled

    @kopf.on.delete(GROUP, VERSION, "scheduledjobs", registry=registry)
    @measured("ScheduledJob")
    async def delete(uid: str, namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
        assert namespace is not None, "ScheduledJob is namespaced"
        await cancel(memo.store, uuid.UUID(uid))
        await memo.mirrors.forget(uuid.UUID(uid), namespace, name)

"""Backfill resources: each makes one backfill in the store (its uid the key, so a restart
or a re-apply makes no second one) of its ScheduledJob's job, whose progress the operator
copies into its status about every second while it runs. `spec.cancel: true`, or deleting
the Backfill, cancels it. The spec is immutable (CEL), but for `cancel`.

Phases: Pending (the ScheduledJob has no job yet: tried again every few seconds), Running,
Completed, Cancelled, Failed (refused by the store's rules: a range reaching into the
future, empty or too long, a ScheduledJob with runAt; with a Warning Event saying why).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NoReturn

import kopf
import pydantic

from horae.clock import utc_now
from horae.domain.backfills import BackfillState, InvalidBackfill
from horae.errors import Conflict, ObjectChanged
from horae.models import ExecutionStatus, JobSource
from horae.operator.conditions import Condition, generation_of
from horae.operator.measuring import measured
from horae.resources import GROUP, VERSION, BackfillSpec
from horae.store import routing
from horae.store.backfills import BackfillRow, NewBackfill

if TYPE_CHECKING:
    from horae.operator.reporting import StatusWriter

log = logging.getLogger(__name__)

PENDING_RETRY_SECONDS = 5
"""A Backfill whose ScheduledJob has no job yet is tried again this often."""
MIRROR_SECONDS = 1.0
"""How often a running Backfill's status is brought up to date from the store."""

_PHASE = {
    BackfillState.RUNNING: "Running",
    BackfillState.COMPLETED: "Completed",
    BackfillState.CANCELLED: "Cancelled",
}
_FAILED = (ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT, ExecutionStatus.DEAD)


def status_of(row: BackfillRow) -> dict[str, Any]:
    """The status fields that come from the store's backfill."""
    counts = row.outcomes
    return {
        "phase": _PHASE[row.state],
        "backfillId": str(row.id),
        "jobId": str(row.job_id),
        "total": row.total,
        "created": row.created,
        "existing": row.existing,
        "succeeded": counts.get(ExecutionStatus.SUCCEEDED, 0),
        "failed": sum(counts.get(s, 0) for s in _FAILED),
        "cancelled": counts.get(ExecutionStatus.CANCELLED, 0),
        "progress": f"{row.created + row.existing}/{row.total}",
    }


def _ready(row: BackfillRow) -> Condition:
    if row.state == BackfillState.CANCELLED:
        return Condition("Ready", True, "Cancelled", row.message or "cancelled")
    return Condition("Ready", True, "Stored", f"backfill {row.id} of job {row.job_id}")


async def _write(
    writer: StatusWriter,
    meta: kopf.Meta,
    fields: dict[str, Any],
    condition: Condition,
) -> None:
    try:
        await writer.write(
            meta["namespace"],
            meta["name"],
            meta["uid"],
            fields,
            [condition],
            generation=generation_of(meta),
        )
    except ObjectChanged as exc:  # written over and over meanwhile: again soon
        raise kopf.TemporaryError(str(exc), delay=1) from exc


async def _fail(memo: kopf.Memo, meta: kopf.Meta, reason: str, message: str) -> NoReturn:
    """Refused for good: phase Failed, Ready=False for `reason`, and a Warning Event."""
    await _write(
        memo.backfill_status, meta, {"phase": "Failed"}, Condition("Ready", False, reason, message)
    )
    await memo.events.emit(
        kind="Backfill",
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        reason=reason,
        message=message,
    )
    raise kopf.PermanentError(message)


async def _cancel(memo: kopf.Memo, uid: str, why: str) -> BackfillRow | None:
    """Cancel the resource's backfill, if it made one; the backfill as it is then."""
    found = await routing.backfill_of_resource(memo.store, uid)
    if found is None:
        return None
    return await routing.cancel_backfill(memo.store, found.id, now=utc_now(), tenant=None, why=why)


def register(registry: kopf.OperatorRegistry) -> None:
    """Register the Backfill handlers on `registry`."""

    @kopf.on.create(GROUP, VERSION, "backfills", registry=registry)
    @kopf.on.resume(GROUP, VERSION, "backfills", registry=registry)
    @kopf.on.update(GROUP, VERSION, "backfills", field="spec.cancel", registry=registry)
    @measured("Backfill")
    async def reconcile(
        spec: kopf.Spec, meta: kopf.Meta, uid: str, namespace: str | None, memo: kopf.Memo, **_: Any
    ) -> None:
        assert namespace is not None, "Backfill is namespaced"
        try:
            parsed = BackfillSpec.model_validate(dict(spec))
        except pydantic.ValidationError as exc:  # a resource stored before its CRD's schema
            await _fail(memo, meta, "InvalidSpec", str(exc))
        row = await routing.backfill_of_resource(memo.store, uid)
        if row is None and parsed.cancel:
            await _write(
                memo.backfill_status,
                meta,
                {"phase": "Cancelled"},
                Condition("Ready", False, "Cancelled", "cancelled before it started"),
            )
            return
        if row is None:
            job_id = await routing.find_live_crd_job(memo.store, namespace, parsed.scheduled_job)
            if job_id is None:
                message = f"ScheduledJob {namespace}/{parsed.scheduled_job} has no job (yet)"
                await _write(
                    memo.backfill_status,
                    meta,
                    {"phase": "Pending"},
                    Condition("Ready", False, "JobNotFound", message),
                )
                raise kopf.TemporaryError(message, delay=PENDING_RETRY_SECONDS)
            new = NewBackfill(
                job_id,
                parsed.from_at,
                parsed.to_at,
                parsed.rate,
                parsed.overlap,
                source=JobSource.CRD,
                crd_uid=uid,
            )
            try:
                row = await routing.create_backfill(
                    memo.store, new, now=utc_now(), tenant=namespace
                )
            except InvalidBackfill as exc:
                await _fail(memo, meta, "InvalidSpec", f"spec.{exc.field}: {exc}")
            except Conflict as exc:
                await _fail(memo, meta, "JobNotBackfillable", str(exc))
            log.info(
                "backfill %s of job %s made for Backfill %s/%s",
                row.id,
                job_id,
                namespace,
                meta["name"],
            )
        if parsed.cancel and row.state == BackfillState.RUNNING:
            row = await routing.cancel_backfill(
                memo.store, row.id, now=utc_now(), tenant=None, why="spec.cancel set"
            )
        await _write(memo.backfill_status, meta, status_of(row), _ready(row))

    def running(status: kopf.Status, **_: Any) -> bool:
        return status.get("phase") == "Running"

    @kopf.timer(
        GROUP, VERSION, "backfills", interval=MIRROR_SECONDS, when=running, registry=registry
    )
    async def mirror(meta: kopf.Meta, uid: str, memo: kopf.Memo, **_: Any) -> None:
        row = await routing.backfill_of_resource(memo.store, uid)
        if row is not None:
            await _write(memo.backfill_status, meta, status_of(row), _ready(row))

    @kopf.on.delete(GROUP, VERSION, "backfills", registry=registry)
    @measured("Backfill")
    async def delete(uid: str, namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
        row = await _cancel(memo, uid, "Backfill deleted")
        if row is not None:
            log.info(
                "backfill %s of Backfill %s/%s deleted: %s", row.id, namespace, name, row.state
            )
        memo.backfill_status.forget(namespace or "", name)

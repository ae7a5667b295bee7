"""A job's actions (pause, resume, trigger, backfill), its executions and its backfills."""

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from horae.api.deps import MayGet, MayUpdate, StoreDep
from horae.api.routes.common import ERRORS
from horae.api.schemas import (
    BackfillCreate,
    BackfillList,
    BackfillOut,
    Created,
    ExecutionOut,
    ExecutionPage,
    PauseRequest,
    decode_cursor,
    encode_cursor,
)
from horae.clock import utc_now
from horae.models import ExecutionStatus
from horae.store import jobs, routing
from horae.store.backfills import NewBackfill

router = APIRouter()


@router.post("/jobs/{job_id}:pause", status_code=204, responses=ERRORS)
async def pause(
    job_id: uuid.UUID, tenant: MayUpdate, store: StoreDep, body: PauseRequest | None = None
) -> None:
    """Pause: pending executions are cancelled; nothing fires until resumed. The body's
    `reason`, if any, is shown as the job's `paused_reason`; pausing a paused job replaces
    it."""
    reason = body.reason if body is not None else None
    await routing.on_job(
        store,
        job_id,
        lambda conn: jobs.pause_job(conn, job_id, now=utc_now(), tenant=tenant, reason=reason),
    )


@router.post("/jobs/{job_id}:resume", status_code=204, responses=ERRORS)
async def resume(job_id: uuid.UUID, tenant: MayUpdate, store: StoreDep) -> None:
    """Resume from now; the job's catch-up policy decides about missed occurrences. A job
    its failure policy paused counts its failures afresh."""
    await routing.on_job(
        store, job_id, lambda conn: jobs.resume_job(conn, job_id, now=utc_now(), tenant=tenant)
    )


@router.post("/jobs/{job_id}:trigger", status_code=201, response_model=Created, responses=ERRORS)
async def trigger(job_id: uuid.UUID, tenant: MayUpdate, store: StoreDep) -> Created:
    """Run one extra occurrence now, outside the schedule; returns the execution id."""
    execution_id = await routing.on_job(
        store, job_id, lambda conn: jobs.trigger_job(conn, job_id, now=utc_now(), tenant=tenant)
    )
    return Created(id=execution_id)


@router.get("/jobs/{job_id}/executions", response_model=ExecutionPage, responses=ERRORS)
async def job_executions(
    job_id: uuid.UUID,
    tenant: MayGet,
    store: StoreDep,
    status: ExecutionStatus | None = None,
    cursor: Annotated[str | None, Query(max_length=500)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> ExecutionPage:
    """A job's executions, newest first (from every store group: a job's history stays in
    the group its shard left)."""
    await routing.get_job(store, job_id, tenant)
    rows = await routing.executions_of_job(
        store, job_id, status=status, before=decode_cursor(cursor), limit=limit
    )
    nxt = encode_cursor(rows[-1].due_at, rows[-1].id) if len(rows) == limit else None
    return ExecutionPage(items=[ExecutionOut.from_row(r) for r in rows], next_cursor=nxt)


@router.post(
    "/jobs/{job_id}:backfill", status_code=201, response_model=BackfillOut, responses=ERRORS
)
async def backfill(
    job_id: uuid.UUID, body: BackfillCreate, tenant: MayUpdate, store: StoreDep
) -> BackfillOut:
    """Run the cron job's past occurrences in [from, to) now, as executions tagged with the
    backfill, at most `rate` a second; an occurrence that already has a run is left alone.
    422 (naming the field) for a range not wholly in the past, empty, or of more than
    1,000,000 occurrences; 409 for a one-off job or one that ended."""
    new = NewBackfill(job_id, body.from_at, body.to_at, body.rate, body.overlap)
    row = await routing.create_backfill(store, new, now=utc_now(), tenant=tenant)
    return BackfillOut.from_row(row)


@router.get("/jobs/{job_id}/backfills", response_model=BackfillList, responses=ERRORS)
async def job_backfills(
    job_id: uuid.UUID,
    tenant: MayGet,
    store: StoreDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> BackfillList:
    """A job's backfills, newest first, with their progress."""
    await routing.get_job(store, job_id, tenant)
    rows = await routing.job_backfills(store, job_id, tenant, limit)
    return BackfillList(items=[BackfillOut.from_row(r) for r in rows])


@router.get("/backfills/{backfill_id}", response_model=BackfillOut, responses=ERRORS)
async def get_backfill(backfill_id: uuid.UUID, tenant: MayGet, store: StoreDep) -> BackfillOut:
    """A backfill and its progress: occurrences created of its total, and its executions'
    outcomes."""
    _, row = await routing.get_backfill(store, backfill_id, tenant)
    return BackfillOut.from_row(row)


@router.post("/backfills/{backfill_id}:cancel", response_model=BackfillOut, responses=ERRORS)
async def cancel_backfill(
    backfill_id: uuid.UUID, tenant: MayUpdate, store: StoreDep
) -> BackfillOut:
    """Stop a backfill: nothing more is created, its executions not claimed yet (published
    or not) end `cancelled` ("backfill cancelled"); those running finish. Cancelling one
    that ended answers it as it is."""
    row = await routing.cancel_backfill(store, backfill_id, now=utc_now(), tenant=tenant)
    return BackfillOut.from_row(row)

"""A job's actions (pause, resume, trigger) and its executions."""

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from horae.api.deps import MayGet, MayUpdate, StoreDep
from horae.api.routes.common import ERRORS
from horae.api.schemas import (
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

"""A job's actions (pause, resume, trigger) and its executions."""

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from horae.api.deps import DatabaseDep, MayGet, MayUpdate
from horae.api.routes.common import ERRORS
from horae.api.schemas import Created, ExecutionOut, ExecutionPage, decode_cursor, encode_cursor
from horae.clock import utc_now
from horae.models import ExecutionStatus
from horae.store import jobs as store
from horae.store import reads

router = APIRouter()


@router.post("/jobs/{job_id}:pause", status_code=204, responses=ERRORS)
async def pause(job_id: uuid.UUID, tenant: MayUpdate, db: DatabaseDep) -> None:
    """Pause: pending executions are cancelled; nothing fires until resumed."""
    async with db.acquire() as conn:
        await store.pause_job(conn, job_id, now=utc_now(), tenant=tenant)


@router.post("/jobs/{job_id}:resume", status_code=204, responses=ERRORS)
async def resume(job_id: uuid.UUID, tenant: MayUpdate, db: DatabaseDep) -> None:
    """Resume from now; the job's catch-up policy decides about missed occurrences."""
    async with db.acquire() as conn:
        await store.resume_job(conn, job_id, now=utc_now(), tenant=tenant)


@router.post("/jobs/{job_id}:trigger", status_code=201, response_model=Created, responses=ERRORS)
async def trigger(job_id: uuid.UUID, tenant: MayUpdate, db: DatabaseDep) -> Created:
    """Run one extra occurrence now, outside the schedule; returns the execution id."""
    async with db.acquire() as conn:
        return Created(id=await store.trigger_job(conn, job_id, now=utc_now(), tenant=tenant))


@router.get("/jobs/{job_id}/executions", response_model=ExecutionPage, responses=ERRORS)
async def job_executions(
    job_id: uuid.UUID,
    tenant: MayGet,
    db: DatabaseDep,
    status: ExecutionStatus | None = None,
    cursor: Annotated[str | None, Query(max_length=500)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> ExecutionPage:
    """A job's executions, newest first."""
    async with db.acquire() as conn:
        await reads.get_job(conn, job_id, tenant)
        rows = await reads.for_job(
            conn, job_id, status=status, before=decode_cursor(cursor), limit=limit
        )
    nxt = encode_cursor(rows[-1].due_at, rows[-1].id) if len(rows) == limit else None
    return ExecutionPage(items=[ExecutionOut.from_row(r) for r in rows], next_cursor=nxt)

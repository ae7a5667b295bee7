"""/executions: read one, and run a failed one again."""

import uuid

from fastapi import APIRouter

from horae.api.deps import DatabaseDep, MayGet, MayUpdate
from horae.api.problems import Problem
from horae.api.routes.common import ERRORS
from horae.api.schemas import Created, ExecutionOut
from horae.clock import utc_now
from horae.store import jobs as store
from horae.store import reads

router = APIRouter()


@router.get("/executions/{execution_id}", response_model=ExecutionOut, responses=ERRORS)
async def get_execution(execution_id: uuid.UUID, tenant: MayGet, db: DatabaseDep) -> ExecutionOut:
    async with db.acquire() as conn:
        row = await reads.get_execution(conn, execution_id, tenant)
    if row is None:
        raise Problem(404, "Not found", f"execution {execution_id} not found")
    return ExecutionOut.from_row(row)


@router.post(
    "/executions/{execution_id}:rerun", status_code=201, response_model=Created, responses=ERRORS
)
async def rerun(execution_id: uuid.UUID, tenant: MayUpdate, db: DatabaseDep) -> Created:
    """Run a dead, failed or timed-out occurrence again, now: one more attempt of the same
    occurrence (same idempotency key), also for a completed one-off job. Only the
    occurrence's latest attempt; 409 for any other, or for a paused or cancelled job.
    Returns the new execution's id."""
    async with db.acquire() as conn:
        new = await store.rerun_execution(conn, execution_id, now=utc_now(), tenant=tenant)
    return Created(id=new)

"""/executions: read one, and run a failed one again."""

import uuid

from fastapi import APIRouter

from horae.api.deps import MayGet, MayUpdate, StoreDep
from horae.api.problems import Problem
from horae.api.routes.common import ERRORS
from horae.api.schemas import Created, ExecutionOut
from horae.clock import utc_now
from horae.store import jobs, quotas, routing

router = APIRouter()


@router.get("/executions/{execution_id}", response_model=ExecutionOut, responses=ERRORS)
async def get_execution(execution_id: uuid.UUID, tenant: MayGet, store: StoreDep) -> ExecutionOut:
    """One execution, from whichever store group holds it."""
    row = await routing.get_execution(store, execution_id, tenant)
    if row is None:
        raise Problem(404, "Not found", f"execution {execution_id} not found")
    return ExecutionOut.from_row(row)


@router.post(
    "/executions/{execution_id}:rerun", status_code=201, response_model=Created, responses=ERRORS
)
async def rerun(execution_id: uuid.UUID, tenant: MayUpdate, store: StoreDep) -> Created:
    """Run a dead, failed or timed-out occurrence again, now: one more attempt of the same
    occurrence (same idempotency key), also for a completed one-off job. Only the
    occurrence's latest attempt; 409 for any other, or for a paused or cancelled job.
    Returns the new execution's id, made in the job's store group (whichever group the
    execution ran in: history stays where it was when the job's shard moves)."""
    found = await routing.get_execution(store, execution_id, tenant)
    if found is None:
        raise Problem(404, "Not found", f"execution {execution_id} not found")
    group = store.catalog.group_of(found.shard)
    elsewhere = await quotas.elsewhere(store, group, [tenant])
    new = await routing.on_job(
        store,
        found.job_id,
        lambda conn: jobs.rerun_execution(
            conn,
            execution_id,
            now=utc_now(),
            tenant=tenant,
            elsewhere=elsewhere,
            found_elsewhere=found,
        ),
    )
    return Created(id=new)

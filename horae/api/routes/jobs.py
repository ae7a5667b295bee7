"""/jobs: create (one, idempotently, or a batch), list, read, edit and cancel jobs."""

import uuid
from datetime import datetime
from typing import Annotated, Any

import pydantic
from fastapi import APIRouter, Header, Query, Response

from horae.api.deps import (
    MayCreate,
    MayDelete,
    MayGet,
    MayList,
    MayUpdate,
    ServicesDep,
    StoreDep,
)
from horae.api.problems import Problem, invalid
from horae.api.routes.common import (
    ERRORS,
    check_payload,
    check_run_at,
    request_hash,
    validate_new,
)
from horae.api.schemas import (
    BatchCreate,
    BatchCreated,
    Created,
    JobCreate,
    JobOut,
    JobPage,
    JobPatch,
    decode_cursor,
    encode_cursor,
)
from horae.clock import utc_now
from horae.domain.fields import first_error
from horae.errors import Conflict
from horae.models import JobSource, JobSpec, JobState
from horae.schedule import next_fire_times
from horae.store import jobs, quotas, routing
from horae.store.groups import Store
from horae.store.new_jobs import NewJob

router = APIRouter()

REPLAYED: dict[int | str, dict[str, Any]] = {
    200: {
        "model": Created,
        "description": "Created earlier by a request with the same Idempotency-Key and body: "
        "that job",
    }
}


@router.post("/jobs:batch", status_code=201, response_model=BatchCreated, responses=ERRORS)
async def create_batch(body: BatchCreate, tenant: MayCreate, svc: ServicesDep) -> BatchCreated:
    """Create up to 1,000 jobs: all or none within each store group (one transaction per
    group holding some of them; with one group, all or none). With several groups, an
    error may come after the groups before it committed their share: list the tenant's
    jobs to see which exist."""
    now = utc_now()
    new = [
        NewJob(
            spec=validate_new(job, now, f"jobs.{i}."),
            tenant=tenant,
            source=JobSource.API,
            name=job.name,
        )
        for i, job in enumerate(body.jobs)
    ]
    await routing.create_jobs(svc.store(), new, now=now)
    return BatchCreated(ids=[j.job_id for j in new])


@router.post("/jobs", status_code=201, response_model=Created, responses=REPLAYED | ERRORS)
async def create(
    body: JobCreate,
    response: Response,
    tenant: MayCreate,
    svc: ServicesDep,
    idempotency_key: Annotated[
        str | None, Header(max_length=200, description="Same key + same body: same job.")
    ] = None,
) -> Created:
    """Create a job and its first execution; answered after COMMIT."""
    now = utc_now()
    spec = validate_new(body, now)
    if not idempotency_key:
        new = NewJob(spec=spec, tenant=tenant, source=JobSource.API, name=body.name)
        return Created(id=await svc.create(new))
    new = NewJob(
        spec=spec,
        tenant=tenant,
        source=JobSource.API,
        job_id=keyed_job_id(tenant, idempotency_key),
        name=body.name,
        idempotency_key=idempotency_key,
        request_hash=request_hash(body),
    )
    job_id, replayed = await _create_once(svc.store(), new, now)
    if replayed:
        response.status_code = 200
    return Created(id=job_id)


IDEMPOTENCY_NAMESPACE = uuid.UUID("5b7c1c8e-4c1e-4d0a-9a57-7e0d1f3c2a61")


def keyed_job_id(tenant: str, key: str) -> uuid.UUID:
    """The id of the job a tenant creates with an Idempotency-Key: derived from both, so a
    repeat lands in the same store group as the first and that group's unique index on
    (tenant, key) decides between concurrent ones."""
    return uuid.uuid5(IDEMPOTENCY_NAMESPACE, f"{tenant}\x00{key}")


async def _create_once(store: Store, new: NewJob, now: datetime) -> tuple[uuid.UUID, bool]:
    """Create `new` unless its key made a job already: (the job's id, whether it had). 409
    when that job was made from another body. (A job made before ids were derived from
    keys has an id of its own; with one store group it is found all the same.)"""
    key = new.idempotency_key or ""
    for _ in range(2):
        seen = await routing.on_job(
            store,
            new.job_id,
            lambda conn: jobs.job_for_idempotency_key(conn, new.tenant, key),
            missing=lambda found: found is None,
        )
        if seen is not None:
            if seen[1] != new.request_hash:
                raise Problem(
                    409, "Conflict", "Idempotency-Key was used with a different request body"
                )
            return seen[0], True
        try:
            await routing.create_jobs(store, [new], now=now)
            return new.job_id, False
        except Conflict:  # the key taken by a concurrent create: read it again
            pass
    raise Problem(409, "Conflict", "Idempotency-Key is being used concurrently")


@router.get("/jobs", response_model=JobPage, responses=ERRORS)
async def list_jobs(
    tenant: MayList,
    store: StoreDep,
    cursor: Annotated[str | None, Query(max_length=500)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    state: JobState | None = None,
) -> JobPage:
    """The tenant's jobs in creation order (from every store group, merged)."""
    rows = await routing.list_jobs(
        store, tenant, after=decode_cursor(cursor), limit=limit, state=state
    )
    nxt = encode_cursor(rows[-1].created_at, rows[-1].id) if len(rows) == limit else None
    return JobPage(items=[JobOut.from_row(r) for r in rows], next_cursor=nxt)


@router.get("/jobs/{job_id}", response_model=JobOut, responses=ERRORS)
async def get_job(job_id: uuid.UUID, tenant: MayGet, store: StoreDep) -> JobOut:
    """One job, with its next 5 fire times."""
    row = await routing.get_job(store, job_id, tenant)
    upcoming: list[datetime] = []
    if row.state == JobState.ACTIVE:
        upcoming = next_fire_times(
            run_at=row.run_at, cron=row.cron, time_zone=row.time_zone, after=utc_now(), count=5
        )
    return JobOut.from_row(row, upcoming)


@router.patch("/jobs/{job_id}", response_model=JobOut, responses=ERRORS)
async def patch_job(
    job_id: uuid.UUID, body: JobPatch, tenant: MayUpdate, store: StoreDep
) -> JobOut:
    """Edit: spec version + 1; pending executions of the old version are cancelled."""
    now = utc_now()
    row = await routing.get_job(store, job_id, tenant)
    changes = body.model_dump(exclude_unset=True)
    # A null leaves the field out, so that it takes its default.
    spec_fields = row.spec.model_dump() | changes
    spec_fields = {k: v for k, v in spec_fields.items() if v is not None}
    try:
        spec = JobSpec.model_validate(spec_fields)
    except pydantic.ValidationError as exc:
        error = first_error(exc)
        raise invalid(error.path(), error.message) from None
    check_payload(spec)
    if "run_at" in body.model_fields_set:
        check_run_at(spec, now)
    elsewhere = await quotas.elsewhere(store, store.catalog.group_of(row.shard), [tenant])
    await routing.on_job(
        store,
        job_id,
        lambda conn: jobs.edit_job(conn, job_id, spec, now=now, tenant=tenant, elsewhere=elsewhere),
    )
    return JobOut.from_row(await routing.get_job(store, job_id, tenant))


@router.delete("/jobs/{job_id}", status_code=204, responses=ERRORS)
async def delete_job(job_id: uuid.UUID, tenant: MayDelete, store: StoreDep) -> None:
    """Cancel: pending executions are cancelled; history is kept."""
    await routing.get_job(store, job_id, tenant)  # 404 for a job not there
    await routing.on_job(
        store, job_id, lambda conn: jobs.cancel_job(conn, job_id, now=utc_now(), tenant=tenant)
    )

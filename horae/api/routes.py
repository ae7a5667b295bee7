"""The job API's endpoints (DESIGN §10). Every write is one store transaction and the
response is sent only after COMMIT.

No `from __future__ import annotations` here: FastAPI must evaluate the
`Annotated[..., Depends(access(...))]` parameters, whose factory is local.
"""

import hashlib
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import pydantic
from fastapi import APIRouter, Depends, Header, Query, Request, Response

from horae.api.auth import CLUSTER, Authenticator, Caller
from horae.api.gate import CALLER_KEY, unauthorized
from horae.api.problems import PROBLEM, Problem, invalid
from horae.api.schemas import (
    BatchCreate,
    BatchCreated,
    Created,
    ExecutionOut,
    ExecutionPage,
    JobCreate,
    JobOut,
    JobPage,
    JobPatch,
    PreviewOut,
    PreviewRequest,
    TenantLimit,
    TenantOut,
    decode_cursor,
    encode_cursor,
)
from horae.batching import GroupCommit
from horae.clock import utc_now
from horae.domain.fields import first_error
from horae.domain.limits import lateness_error, payload_size_error
from horae.errors import Conflict
from horae.models import ExecutionStatus, JobSource, JobSpec, JobState
from horae.schedule import next_fire_times, validate_cron
from horae.store import jobs as store
from horae.store import reads, tenants
from horae.store.db import Database
from horae.store.new_jobs import NewJob

if TYPE_CHECKING:
    pass

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"description": text, "content": {PROBLEM: {}}}
    for code, text in {
        401: "Missing or invalid bearer token",
        403: "The caller may not do this in this tenant",
        404: "No such job or execution in this tenant",
        409: "Conflicts with the job's state or an Idempotency-Key",
        413: "Payload or batch too large",
        422: "Invalid request; `errors` names each field",
        429: "The tenant is at one of its quotas (max_jobs, max_fires_per_minute); `errors` "
        "names it",
    }.items()
}


def _check_payload(spec: JobSpec, field: str = "payload") -> None:
    error = payload_size_error(spec.payload)
    if error is not None:
        raise invalid(field, error, 413)


def _check_run_at(spec: JobSpec, now: datetime, field: str = "run_at") -> None:
    error = lateness_error(
        spec.run_at, starting_deadline_seconds=spec.starting_deadline_seconds, now=now
    )
    if error is not None:
        raise invalid(field, f"run_at {error}")


def _validate_new(job: JobCreate, now: datetime, prefix: str = "") -> JobSpec:
    spec = job.spec()
    _check_payload(spec, f"{prefix}payload")
    _check_run_at(spec, now, f"{prefix}run_at")
    return spec


def _request_hash(job: JobCreate) -> str:
    return hashlib.sha256(job.model_dump_json().encode()).hexdigest()


def build_router(
    *, pool: Callable[[], Database], auth: Authenticator,
    shards: Callable[[], int],
) -> APIRouter:  # fmt: skip
    router = APIRouter()

    async def create_many(new: Sequence[NewJob]) -> list[uuid.UUID]:
        """Concurrent single creates, committed together; each caller is answered only
        after the COMMIT that holds its job. A flush that fails, for any reason, is tried
        again job by job (`isolate`), so one tenant's bad job cannot fail another's."""
        async with pool().acquire() as conn:
            await store.create_jobs(conn, new, shards=shards(), now=utc_now())
        return [job.job_id for job in new]

    creates = GroupCommit(create_many, max_batch=500, isolate=True)

    def access(
        verb: str, resource: str = "jobs", *, cluster: bool = False
    ) -> Callable[..., Awaitable[str]]:
        """A dependency answering the caller's tenant once it may `verb` `resource` there;
        `cluster`: a permission bound cluster-wide (ClusterRoleBinding), not in the tenant's
        namespace, for what a tenant must not decide about itself."""

        async def dependency(
            request: Request,
            horae_tenant: Annotated[
                str | None,
                Header(description="Tenant (namespace) to act in; default: the caller's own."),
            ] = None,
        ) -> str:
            # The Gate authenticated the token before the body was read; a route the Gate
            # lets through unauthenticated (a public path) is refused rather than reviewed.
            caller: Caller | None = request.scope.get(CALLER_KEY)
            if caller is None:
                raise unauthorized("a bearer token is required")
            tenant = horae_tenant or caller.default_tenant
            if not tenant:
                raise invalid("Horae-Tenant", "header required: this caller has no default tenant")
            if len(tenant) > 253:
                raise invalid("Horae-Tenant", "at most 253 characters")
            if not await auth.allowed(caller, verb, resource, CLUSTER if cluster else tenant):
                where = "cluster-wide" if cluster else "in tenant"
                raise Problem(
                    403, "Forbidden", f"{caller.name} may not {verb} {resource} {where} {tenant}"
                )
            return tenant

        return dependency

    @router.post("/jobs:batch", status_code=201, response_model=BatchCreated, responses=ERRORS)
    async def create_batch(
        body: BatchCreate, tenant: Annotated[str, Depends(access("create"))]
    ) -> BatchCreated:
        """Create up to 1,000 jobs in one transaction: all or none."""
        now = utc_now()
        new = [
            NewJob(spec=_validate_new(job, now, f"jobs.{i}."), tenant=tenant,
                         source=JobSource.API, name=job.name)
            for i, job in enumerate(body.jobs)
        ]  # fmt: skip
        async with pool().acquire() as conn:
            await store.create_jobs(conn, new, shards=shards(), now=now)
        return BatchCreated(ids=[j.job_id for j in new])

    @router.post("/jobs", status_code=201, response_model=Created, responses={
        200: {"model": Created, "description": "Created earlier by a request with the same "
              "Idempotency-Key and body: that job"}, **ERRORS,
    })  # fmt: skip
    async def create(
        body: JobCreate,
        response: Response,
        tenant: Annotated[str, Depends(access("create"))],
        idempotency_key: Annotated[
            str | None, Header(max_length=200, description="Same key + same body: same job.")
        ] = None,
    ) -> Created:
        """Create a job and its first execution; answered after COMMIT."""
        now = utc_now()
        spec = _validate_new(body, now)
        if not idempotency_key:
            created = await creates.submit(
                NewJob(spec=spec, tenant=tenant, source=JobSource.API, name=body.name)
            )
            return Created(id=created)
        digest = _request_hash(body)
        async with pool().acquire() as conn:
            for _ in range(2):
                if idempotency_key:
                    seen = await store.job_for_idempotency_key(conn, tenant, idempotency_key)
                    if seen is not None:
                        if seen[1] != digest:
                            raise Problem(409, "Conflict", "Idempotency-Key was used with a "
                                          "different request body")  # fmt: skip
                        response.status_code = 200
                        return Created(id=seen[0])
                try:
                    job_id = await store.create_job(
                        conn, spec, tenant=tenant, source=JobSource.API, shards=shards(), now=now,
                        name=body.name, idempotency_key=idempotency_key, request_hash=digest,
                    )  # fmt: skip
                    return Created(id=job_id)
                except Conflict:  # the key taken by a concurrent create: read it again
                    if not idempotency_key:
                        raise
        raise Problem(409, "Conflict", "Idempotency-Key is being used concurrently")

    @router.get("/jobs", response_model=JobPage, responses=ERRORS)
    async def list_jobs(
        tenant: Annotated[str, Depends(access("list"))],
        cursor: Annotated[str | None, Query(max_length=500)] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 100,
        state: JobState | None = None,
    ) -> JobPage:
        """The tenant's jobs in creation order."""
        async with pool().acquire() as conn:
            rows = await reads.list_jobs(
                conn, tenant, after=decode_cursor(cursor), limit=limit, state=state
            )
        nxt = encode_cursor(rows[-1].created_at, rows[-1].id) if len(rows) == limit else None
        return JobPage(items=[JobOut.from_row(r) for r in rows], next_cursor=nxt)

    @router.post("/jobs/{job_id}:pause", status_code=204, responses=ERRORS)
    async def pause(job_id: uuid.UUID, tenant: Annotated[str, Depends(access("update"))]) -> None:
        """Pause: pending executions are cancelled; nothing fires until resumed."""
        async with pool().acquire() as conn:
            await store.pause_job(conn, job_id, now=utc_now(), tenant=tenant)

    @router.post("/jobs/{job_id}:resume", status_code=204, responses=ERRORS)
    async def resume(job_id: uuid.UUID, tenant: Annotated[str, Depends(access("update"))]) -> None:
        """Resume from now; the job's catch-up policy decides about missed occurrences."""
        async with pool().acquire() as conn:
            await store.resume_job(conn, job_id, now=utc_now(), tenant=tenant)

    @router.post("/jobs/{job_id}:trigger", status_code=201, response_model=Created,
                 responses=ERRORS)  # fmt: skip
    async def trigger(
        job_id: uuid.UUID, tenant: Annotated[str, Depends(access("update"))]
    ) -> Created:
        """Run one extra occurrence now, outside the schedule; returns the execution id."""
        async with pool().acquire() as conn:
            return Created(id=await store.trigger_job(conn, job_id, now=utc_now(), tenant=tenant))

    @router.get("/jobs/{job_id}/executions", response_model=ExecutionPage, responses=ERRORS)
    async def job_executions(
        job_id: uuid.UUID,
        tenant: Annotated[str, Depends(access("get"))],
        status: ExecutionStatus | None = None,
        cursor: Annotated[str | None, Query(max_length=500)] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 100,
    ) -> ExecutionPage:
        """A job's executions, newest first."""
        async with pool().acquire() as conn:
            await reads.get_job(conn, job_id, tenant)
            rows = await reads.for_job(
                conn, job_id, status=status, before=decode_cursor(cursor), limit=limit
            )
        nxt = encode_cursor(rows[-1].due_at, rows[-1].id) if len(rows) == limit else None
        return ExecutionPage(items=[ExecutionOut.from_row(r) for r in rows], next_cursor=nxt)

    @router.get("/jobs/{job_id}", response_model=JobOut, responses=ERRORS)
    async def get_job(job_id: uuid.UUID, tenant: Annotated[str, Depends(access("get"))]) -> JobOut:
        """One job, with its next 5 fire times."""
        async with pool().acquire() as conn:
            row = await reads.get_job(conn, job_id, tenant)
        upcoming: list[datetime] = []
        if row.state == JobState.ACTIVE:
            upcoming = next_fire_times(
                run_at=row.run_at, cron=row.cron, time_zone=row.time_zone,
                after=utc_now(), count=5,
            )  # fmt: skip
        return JobOut.from_row(row, upcoming)

    @router.patch("/jobs/{job_id}", response_model=JobOut, responses=ERRORS)
    async def patch_job(
        job_id: uuid.UUID, body: JobPatch, tenant: Annotated[str, Depends(access("update"))]
    ) -> JobOut:
        """Edit: spec version + 1; pending executions of the old version are cancelled."""
        now = utc_now()
        async with pool().acquire() as conn:
            row = await reads.get_job(conn, job_id, tenant)
            changes = body.model_dump(exclude_unset=True)
            # A null leaves the field out, so that it takes its default.
            spec_fields = row.spec.model_dump() | changes
            spec_fields = {k: v for k, v in spec_fields.items() if v is not None}
            try:
                spec = JobSpec.model_validate(spec_fields)
            except pydantic.ValidationError as exc:
                error = first_error(exc)
                raise invalid(error.path(), error.message) from None
            _check_payload(spec)
            if "run_at" in body.model_fields_set:
                _check_run_at(spec, now)
            await store.edit_job(conn, job_id, spec, now=now, tenant=tenant)
            return JobOut.from_row(await reads.get_job(conn, job_id, tenant))

    @router.delete("/jobs/{job_id}", status_code=204, responses=ERRORS)
    async def delete_job(
        job_id: uuid.UUID, tenant: Annotated[str, Depends(access("delete"))]
    ) -> None:
        """Cancel: pending executions are cancelled; history is kept."""
        async with pool().acquire() as conn:
            await reads.get_job(conn, job_id, tenant)  # 404 for a job not there
            await store.cancel_job(conn, job_id, now=utc_now(), tenant=tenant)

    @router.get("/executions/{execution_id}", response_model=ExecutionOut, responses=ERRORS)
    async def get_execution(
        execution_id: uuid.UUID, tenant: Annotated[str, Depends(access("get"))]
    ) -> ExecutionOut:
        async with pool().acquire() as conn:
            row = await reads.get_execution(conn, execution_id, tenant)
        if row is None:
            raise Problem(404, "Not found", f"execution {execution_id} not found")
        return ExecutionOut.from_row(row)

    @router.post("/executions/{execution_id}:rerun", status_code=201, response_model=Created,
                 responses=ERRORS)  # fmt: skip
    async def rerun(
        execution_id: uuid.UUID, tenant: Annotated[str, Depends(access("update"))]
    ) -> Created:
        """Run a dead, failed or timed-out occurrence again, now: one more attempt of the same
        occurrence (same idempotency key), also for a completed one-off job. Only the
        occurrence's latest attempt; 409 for any other, or for a paused or cancelled job.
        Returns the new execution's id."""
        async with pool().acquire() as conn:
            return Created(
                id=await store.rerun_execution(conn, execution_id, now=utc_now(), tenant=tenant)
            )

    @router.post("/schedules:preview", response_model=PreviewOut, responses=ERRORS)
    async def preview(body: PreviewRequest) -> PreviewOut:
        """Fire times of a schedule, without creating anything."""
        if (body.cron is None) == (body.run_at is None):
            raise invalid("cron", "exactly one of cron and run_at is required")
        try:
            spec = JobSpec(task="preview", cron=body.cron, run_at=body.run_at,
                           time_zone=body.time_zone)  # fmt: skip
        except pydantic.ValidationError as exc:
            error = first_error(exc)
            raise invalid(error.path(default="cron"), error.message) from None
        if spec.cron is not None:
            validate_cron(spec.cron)
        after = body.after or utc_now()  # bounded by PreviewRequest
        times = next_fire_times(
            run_at=spec.run_at, cron=spec.cron, time_zone=spec.time_zone, after=after,
            count=body.count,
        )  # fmt: skip
        return PreviewOut(fire_times=times)

    @router.put("/tenants/{name}", response_model=TenantOut, responses=ERRORS)
    async def set_tenant(name: str, body: TenantLimit, request: Request) -> TenantOut:
        """Replace a tenant's settings: its limit of concurrently running executions (null:
        no limit) and its quotas (left out or null: the defaults). An administrator's
        setting: needs `update` on `tenants` in group horae.dev granted cluster-wide (a
        ClusterRoleBinding), never rights inside the tenant's namespace."""
        tenant = await access("update", "tenants", cluster=True)(request, horae_tenant=name)
        async with pool().acquire() as conn:
            row = await tenants.set_tenant_limit(
                conn,
                tenant,
                body.max_running,
                max_jobs=body.max_jobs,
                max_fires_per_minute=body.max_fires_per_minute,
            )
        return TenantOut.model_validate(row, from_attributes=True)

    return router

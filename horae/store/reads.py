"""Reads for the API, the CLI and the operator: a job, a tenant's jobs, ScheduledJobs'
jobs, and a job's executions. Each answers frozen rows (`rows`)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from horae.errors import NotFound
from horae.models import ExecutionStatus, JobState
from horae.store.boundary import translated
from horae.store.queries import Q
from horae.store.rows import CrdJob, ExecutionRow, JobRow, execution_of, job_of

if TYPE_CHECKING:
    from horae.store.db import Conn


@translated
async def get_job(conn: Conn, job_id: uuid.UUID, tenant: str | None = None) -> JobRow:
    """The job (of `tenant`; None: of any tenant); NotFound when there is none."""
    row = await conn.fetchrow(Q["get_job"], job_id, tenant)
    if row is None:
        raise NotFound(f"job {job_id} not found")
    return job_of(row)


@translated
async def find_job(conn: Conn, job_id: uuid.UUID) -> JobRow | None:
    """The job, of any tenant, or None."""
    row = await conn.fetchrow(Q["get_job"], job_id, None)
    return job_of(row) if row is not None else None


@translated
async def existing_ids(conn: Conn, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Those of `ids` that are jobs (in any state)."""
    return {r["id"] for r in await conn.fetch(Q["existing_job_ids"], list(ids))}


@translated
async def live_crd_jobs(conn: Conn) -> list[CrdJob]:
    """Jobs of ScheduledJobs that are not cancelled."""
    rows = await conn.fetch(Q["live_crd_jobs"])
    return [
        CrdJob(r["id"], r["tenant"], r["name"], JobState(r["state"]), r["created_at"]) for r in rows
    ]


@translated
async def list_jobs(
    conn: Conn,
    tenant: str,
    *,
    after: tuple[datetime, uuid.UUID] | None,
    limit: int,
    state: JobState | None = None,
) -> list[JobRow]:
    """A tenant's jobs in creation order, after the cursor `after` (created_at, id)."""
    created, last_id = after if after else (None, None)
    return [
        job_of(r) for r in await conn.fetch(Q["list_jobs"], tenant, state, created, last_id, limit)
    ]


@translated
async def find_live_crd_job(conn: Conn, tenant: str, name: str) -> uuid.UUID | None:
    """The live job of the ScheduledJob NAMESPACE/NAME, if any."""
    job_id: uuid.UUID | None = await conn.fetchval(Q["live_crd_job"], tenant, name)
    return job_id


@translated
async def for_job(
    conn: Conn,
    job_id: uuid.UUID,
    *,
    status: ExecutionStatus | None = None,
    before: tuple[datetime, uuid.UUID] | None = None,
    limit: int = 50,
) -> list[ExecutionRow]:
    """A job's executions, newest first, before the cursor `before` (due_at, id); of one
    `status` through an index on it, never a read of the job's whole history."""
    due, last_id = before if before else (None, None)
    if status is None:
        rows = await conn.fetch(Q["job_executions"], job_id, due, last_id, limit)
    elif status in (ExecutionStatus.QUEUED, ExecutionStatus.RUNNING):
        rows = await conn.fetch(Q["job_executions_live"], job_id, status, due, last_id, limit)
    else:
        rows = await conn.fetch(Q["job_executions_of_status"], job_id, status, due, last_id, limit)
    return [execution_of(r) for r in rows]


@translated
async def recent_of_job(conn: Conn, job_id: uuid.UUID, limit: int) -> list[ExecutionRow]:
    """A job's `limit` newest executions past `scheduled`, newest first."""
    return [execution_of(r) for r in await conn.fetch(Q["recent_of_job"], job_id, limit)]


@translated
async def recent_of_job_by_outcome(
    conn: Conn, job_id: uuid.UUID, *, succeeded: int, failed: int
) -> list[ExecutionRow]:
    """A job's queued and running executions, its `succeeded` newest succeeded ones and its
    `failed` newest that ended otherwise (failed, timed out, dead, cancelled, skipped)."""
    rows = await conn.fetch(Q["recent_of_job_by_outcome"], job_id, succeeded, failed)
    return [execution_of(r) for r in rows]


@translated
async def job_run_times(conn: Conn, job_id: uuid.UUID) -> tuple[datetime | None, datetime | None]:
    """(the nominal time of the job's newest dispatched scheduled occurrence, the finish time
    of its newest succeeded execution); None where there is none."""
    row = await conn.fetchrow(Q["job_run_times"], job_id)
    assert row is not None  # (one row of two scalar subqueries, always)
    return row["last_schedule"], row["last_success"]


@translated
async def get_execution(
    conn: Conn, execution_id: uuid.UUID, tenant: str | None
) -> ExecutionRow | None:
    """One execution (of `tenant`; None: of any tenant)."""
    row = await conn.fetchrow(Q["get_execution"], execution_id, tenant)
    return execution_of(row) if row is not None else None


@translated
async def execution_ids_in_range(
    conn: Conn, low: uuid.UUID, high: uuid.UUID, limit: int
) -> list[uuid.UUID]:
    """The execution ids from `low` to `high` (inclusive), at most `limit`, in order."""
    return [r["id"] for r in await conn.fetch(Q["execution_ids_in_range"], low, high, limit)]

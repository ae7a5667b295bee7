"""The job lifecycle, one transaction per operation: create (one or a batch), edit,
pause, resume, trigger, cancel; plus reads (a job, a tenant's jobs) and tenants."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import asyncpg

from horae.errors import Conflict, NotFound
from horae.models import CatchUpPolicy, ExecutionStatus, JobSource, JobSpec, JobState, shard_of
from horae.schedule import fires_per_minute, jitter_offset, latest_fire_times, next_fire_times
from horae.store import quotas
from horae.store.boundary import translated
from horae.store.queries import Q
from horae.store.rows import CrdJob, JobRow, TenantRow, execution_of, job_of

if TYPE_CHECKING:
    from horae.store.db import Conn

NOTIFY_WITHIN = timedelta(seconds=60)
"""Executions due sooner than this are announced to their shard's scheduler at once."""
MAX_SKIPPED_ON_RESUME = 100
"""Missed occurrences recorded as `skipped` when a paused job resumes: the most recent this
many (after the one catch-up `Latest` runs); older ones leave no row."""


@dataclass(frozen=True)
class Occurrence:
    occurrence_at: datetime
    due_at: datetime


def next_occurrence(job_id: uuid.UUID, spec: JobSpec, after: datetime) -> Occurrence | None:
    """The first nominal fire time strictly after `after`, and when it is due (jitter added)."""
    times = next_fire_times(
        run_at=spec.run_at, cron=spec.cron, time_zone=spec.time_zone, after=after, count=1
    )
    if not times:
        return None
    return Occurrence(times[0], times[0] + jitter_offset(job_id, spec.jitter_seconds))


def spec_of_record(row: asyncpg.Record) -> JobSpec:
    """The spec of a record that has a job's spec columns (a claim's answer, say)."""
    return JobSpec(
        task=row["task"],
        payload=row["payload"],
        run_at=row["run_at"],
        cron=row["cron"],
        time_zone=row["time_zone"],
        jitter_seconds=row["jitter_seconds"],
        retry=row["retry_policy"],
        timeout_seconds=row["timeout_seconds"],
        concurrency_policy=row["concurrency_policy"],
        starting_deadline_seconds=row["starting_deadline_seconds"],
        catch_up=row["catch_up"],
    )


@dataclass(frozen=True, slots=True)
class NewExecution:
    """An execution to schedule (a job's next occurrence, or a retry)."""

    job_id: uuid.UUID
    tenant: str
    task: str
    shard: int
    due_at: datetime
    occurrence_at: datetime
    attempt: int
    job_version: int


def new_execution_id() -> uuid.UUID:
    """A UUIDv7 (RFC 9562): milliseconds since the epoch, then random bits. Executions
    created later sort later among those due at the same instant, so the scheduler's
    preload cursor, which walks (due_at, id), finds new rows ahead of it instead of behind
    it (see `executions.parse_notify`). Correctness never depends on this order, only the work."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & (2**48 - 1)) << 80 | 0x7 << 76 | (rand >> 62 & 0xFFF) << 64
    value |= 0b10 << 62 | rand & (2**62 - 1)
    return uuid.UUID(int=value)


@translated
async def insert_executions(
    conn: Conn, new: Sequence[NewExecution], now: datetime
) -> list[uuid.UUID]:
    """Insert scheduled executions in one statement (an occurrence already scheduled is
    left alone); those due soon are announced to their shards. Returns the ids inserted."""
    if not new:
        return []
    rows = await conn.fetch(
        Q["insert_executions"],
        [new_execution_id() for _ in new],
        [n.job_id for n in new],
        [n.tenant for n in new],
        [n.task for n in new],
        [n.shard for n in new],
        [n.due_at for n in new],
        [n.occurrence_at for n in new],
        [n.attempt for n in new],
        [n.job_version for n in new],
        now,
        now + NOTIFY_WITHIN,
    )
    return [r["id"] for r in rows]


@translated
async def insert_execution(
    conn: Conn,
    *,
    job_id: uuid.UUID,
    tenant: str,
    task: str,
    shard: int,
    due_at: datetime,
    occurrence_at: datetime,
    attempt: int,
    job_version: int,
    now: datetime,
) -> uuid.UUID | None:
    """Insert one scheduled execution; announce it to its shard when due soon."""
    new = NewExecution(job_id, tenant, task, shard, due_at, occurrence_at, attempt, job_version)
    inserted = await insert_executions(conn, [new], now)
    return inserted[0] if inserted else None


@translated
async def schedule_occurrence(
    conn: Conn,
    job_id: uuid.UUID,
    spec: JobSpec,
    occurrence: Occurrence,
    *,
    tenant: str,
    shard: int,
    job_version: int,
    now: datetime,
) -> Occurrence | None:
    """Schedule `occurrence`, or the first later one that has no live row yet.

    An occurrence that already has a live row (say it is running while the job
    is edited) is not run twice; the job still gets its next pending execution.
    """
    current: Occurrence | None = occurrence
    for _ in range(10):
        if current is None:
            return None
        inserted = await insert_execution(
            conn,
            job_id=job_id,
            tenant=tenant,
            task=spec.task,
            shard=shard,
            due_at=current.due_at,
            occurrence_at=current.occurrence_at,
            attempt=1,
            job_version=job_version,
            now=now,
        )
        if inserted is not None:
            return current
        current = next_occurrence(job_id, spec, current.occurrence_at)
    return None


@dataclass(frozen=True)
class NewJob:
    """One job to create; `job_id` defaults to a fresh uuid."""

    spec: JobSpec
    tenant: str
    source: JobSource
    job_id: uuid.UUID = field(default_factory=uuid.uuid4)
    name: str | None = None
    idempotency_key: str | None = None
    request_hash: str | None = None
    paused: bool = False


def _first_occurrence(job: NewJob, now: datetime) -> Occurrence | None:
    first = next_occurrence(job.job_id, job.spec, now - timedelta(microseconds=1))
    if first is None and job.spec.run_at is not None:
        # A one-off whose time has just passed (within its deadline) fires now.
        first = Occurrence(job.spec.run_at, job.spec.run_at)
    return first


def rate(spec: JobSpec) -> float:
    """The job's fire rate as tenant quotas count it (`fires_per_minute`)."""
    return fires_per_minute(spec.cron, spec.time_zone)


@translated
async def create_jobs(conn: Conn, jobs: Sequence[NewJob], *, shards: int, now: datetime) -> None:
    """Insert jobs and their first executions, within their tenants' quotas (QuotaExceeded
    otherwise, and nothing is written): the quota check, then one statement. Conflict when a
    job's id or Idempotency-Key is taken."""
    try:
        async with conn.transaction():
            await quotas.check(conn, [(j.tenant, 1, rate(j.spec)) for j in jobs])
            await _insert_jobs(conn, jobs, shards=shards, now=now)
    except asyncpg.UniqueViolationError as exc:
        # A concurrent create took one of these ids or Idempotency-Keys first.
        raise Conflict(f"a job with this id or Idempotency-Key exists: {exc}") from exc


async def _insert_jobs(conn: Conn, jobs: Sequence[NewJob], *, shards: int, now: datetime) -> None:
    firsts = [_first_occurrence(j, now) for j in jobs]
    shard_of_job = [shard_of(j.job_id, shards) for j in jobs]
    runnable = [
        (j, f, s) for j, f, s in zip(jobs, firsts, shard_of_job, strict=True) if f and not j.paused
    ]
    exec_ids = [new_execution_id() for _ in runnable]
    await conn.execute(
        Q["insert_jobs"],
        [j.job_id for j in jobs],
        [j.tenant for j in jobs],
        [j.name for j in jobs],
        [j.source.value for j in jobs],
        [j.spec.task for j in jobs],
        [j.spec.payload for j in jobs],
        [j.spec.run_at for j in jobs],
        [j.spec.cron for j in jobs],
        [j.spec.time_zone for j in jobs],
        [j.spec.jitter_seconds for j in jobs],
        [j.spec.retry.model_dump() for j in jobs],
        [j.spec.timeout_seconds for j in jobs],
        [j.spec.concurrency_policy.value for j in jobs],
        [j.spec.starting_deadline_seconds for j in jobs],
        [j.spec.catch_up.value for j in jobs],
        [JobState.PAUSED.value if j.paused else JobState.ACTIVE.value for j in jobs],
        shard_of_job,
        [f.occurrence_at if f else None for f in firsts],
        [j.idempotency_key for j in jobs],
        [j.request_hash for j in jobs],
        now,
        exec_ids,
        [j.job_id for j, _, _ in runnable],
        [j.tenant for j, _, _ in runnable],
        [j.spec.task for j, _, _ in runnable],
        [s for _, _, s in runnable],
        [f.due_at for _, f, _ in runnable],
        [f.occurrence_at for _, f, _ in runnable],
        now + NOTIFY_WITHIN,
        [j.spec.starting_deadline_seconds for j, _, _ in runnable],
        [j.spec.concurrency_policy.value for j, _, _ in runnable],
        [rate(j.spec) for j in jobs],
    )


@translated
async def create_job(
    conn: Conn,
    spec: JobSpec,
    *,
    tenant: str,
    source: JobSource,
    shards: int,
    now: datetime,
    job_id: uuid.UUID | None = None,
    name: str | None = None,
    idempotency_key: str | None = None,
    request_hash: str | None = None,
    paused: bool = False,
) -> uuid.UUID:
    """Insert one job and its first execution in one transaction."""
    job = NewJob(
        spec=spec,
        tenant=tenant,
        source=source,
        job_id=job_id or uuid.uuid4(),
        name=name,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        paused=paused,
    )
    await create_jobs(conn, [job], shards=shards, now=now)
    return job.job_id


@translated
async def job_for_idempotency_key(
    conn: Conn, tenant: str, key: str
) -> tuple[uuid.UUID, str] | None:
    """(job id, request hash) of the job created earlier with this Idempotency-Key."""
    found = await conn.fetchrow(Q["job_by_idempotency_key"], tenant, key)
    return (found["id"], found["request_hash"]) if found else None


async def _locked(
    conn: Conn, job_id: uuid.UUID, tenant: str | None, *, by: JobSource | None = None
) -> JobRow:
    """The job's row, locked for the transaction. `by`: who changes it, refused (Conflict)
    unless the job is theirs: a ScheduledJob's job is its manifest's (the operator would
    bring back whatever the API or CLI changed, and a cancel would leave the resource
    retrying forever), and the operator never changes a job made through the API."""
    record = await conn.fetchrow(Q["get_job_for_update"], job_id)
    if record is None or (tenant is not None and record["tenant"] != tenant):
        raise NotFound(f"job {job_id} not found")
    row = job_of(record)
    if by is not None and row.source != by:
        if row.source == JobSource.CRD:
            name, namespace = row.name, row.tenant
            raise Conflict(
                f"job {job_id} is managed by ScheduledJob {namespace}/{name}: change it there"
                f" (kubectl edit scheduledjob/{name} -n {namespace}; kubectl delete to cancel it)"
            )
        raise Conflict(f"job {job_id} was made through the API, not by a ScheduledJob")
    return row


@translated
async def edit_job(
    conn: Conn,
    job_id: uuid.UUID,
    spec: JobSpec,
    *,
    now: datetime,
    tenant: str | None = None,
    by: JobSource = JobSource.API,
) -> int:
    """Replace the spec (version + 1), cancel pending executions, schedule the next one.
    `by`: the API (and CLI) or the operator, each changing only its own jobs."""
    async with conn.transaction():
        row = await _locked(conn, job_id, tenant, by=by)
        if row.state == JobState.CANCELLED:
            raise Conflict(f"job {job_id} is cancelled")
        revived = row.state == JobState.COMPLETED  # an edit makes a completed job active
        added = rate(spec) - (0.0 if revived else row.fires_per_minute)
        await quotas.check(conn, [(row.tenant, int(revived), max(0.0, added))])
        await conn.execute(
            Q["cancel_pending"], job_id, now, "superseded", "job spec edited before this ran"
        )
        nxt = next_occurrence(job_id, spec, now)
        updated = await conn.fetchrow(
            Q["update_job_spec"],
            job_id,
            spec.task,
            spec.payload,
            spec.run_at,
            spec.cron,
            spec.time_zone,
            spec.jitter_seconds,
            spec.retry.model_dump(),
            spec.timeout_seconds,
            spec.concurrency_policy.value,
            spec.starting_deadline_seconds,
            nxt.occurrence_at if nxt else None,
            now,
            spec.catch_up.value,
            rate(spec),
        )
        assert updated is not None  # the row is locked above
        version, state = updated["spec_version"], updated["state"]
        if nxt is not None and state == JobState.ACTIVE:
            await schedule_occurrence(
                conn,
                job_id,
                spec,
                nxt,
                tenant=row.tenant,
                shard=row.shard,
                job_version=version,
                now=now,
            )
        return int(version)


@translated
async def pause_job(
    conn: Conn,
    job_id: uuid.UUID,
    *,
    now: datetime,
    tenant: str | None = None,
    by: JobSource = JobSource.API,
) -> None:
    """Pause: pending executions are cancelled (reason: paused). Pausing twice is a no-op."""
    async with conn.transaction():
        row = await _locked(conn, job_id, tenant, by=by)
        state = JobState(row.state)
        if state == JobState.PAUSED:
            return
        if state != JobState.ACTIVE:
            raise Conflict(f"job {job_id} is {state.value}: only an active job can be paused")
        await conn.execute(Q["cancel_pending"], job_id, now, "paused", "job paused")
        await conn.execute(Q["set_job_state"], job_id, JobState.PAUSED.value, None, now)


def missed_on_resume(
    spec: JobSpec, since: datetime, now: datetime
) -> tuple[list[datetime], datetime | None]:
    """A cron job paused since `since` and resumed at `now`: the missed occurrences to
    record `skipped` (the most recent `MAX_SKIPPED_ON_RESUME`), and the one to run now
    (catch-up `Latest`: the most recent), if any."""
    assert spec.cron is not None
    # The latest missed occurrences only, found from `now` backwards: the cost does not
    # grow with the pause (a year of a every-second job is 31.5 M occurrences).
    missed = latest_fire_times(
        spec.cron, spec.time_zone, after=since, until=now, count=MAX_SKIPPED_ON_RESUME + 1
    )
    run_now = missed.pop() if missed and spec.catch_up == CatchUpPolicy.LATEST else None
    return missed[-MAX_SKIPPED_ON_RESUME:], run_now


async def _catch_up(conn: Conn, job: JobRow, now: datetime) -> None:
    """Record a resumed cron job's missed occurrences, and run the one catch-up runs now."""
    skipped, run_now = missed_on_resume(job.spec, job.paused_at or job.updated_at, now)
    for fire in skipped:
        await conn.execute(
            Q["insert_skipped"],
            new_execution_id(),
            job.id,
            job.tenant,
            job.task,
            job.shard,
            fire,
            job.spec_version,
            now,
            "paused",
            "job was paused at this time",
        )
    if run_now is not None:
        await insert_execution(
            conn,
            job_id=job.id,
            tenant=job.tenant,
            task=job.task,
            shard=job.shard,
            due_at=now,
            occurrence_at=run_now,
            attempt=1,
            job_version=job.spec_version,
            now=now,
        )


@translated
async def resume_job(
    conn: Conn,
    job_id: uuid.UUID,
    *,
    now: datetime,
    tenant: str | None = None,
    by: JobSource = JobSource.API,
) -> None:
    """Resume from now. The most recent `MAX_SKIPPED_ON_RESUME` missed occurrences are
    recorded `skipped` (reason: paused), except that catch-up `Latest` runs the most recent
    one now; older ones leave no row. A one-off that was missed runs now.
    """
    async with conn.transaction():
        row = await _locked(conn, job_id, tenant, by=by)
        state = JobState(row.state)
        if state == JobState.ACTIVE:
            return
        if state != JobState.PAUSED:
            raise Conflict(f"job {job_id} is {state.value}: only a paused job can be resumed")
        spec = row.spec
        version = row.spec_version
        nxt: Occurrence | None
        if spec.run_at is not None:
            nxt = Occurrence(spec.run_at, max(spec.run_at, now))
        else:
            await _catch_up(conn, row, now)
            nxt = next_occurrence(job_id, spec, now)
        await conn.execute(
            Q["set_job_state"],
            job_id,
            JobState.ACTIVE.value,
            nxt.occurrence_at if nxt else None,
            now,
        )
        if nxt is not None:
            await schedule_occurrence(
                conn,
                job_id,
                spec,
                nxt,
                tenant=row.tenant,
                shard=row.shard,
                job_version=version,
                now=now,
            )


@translated
async def set_paused(conn: Conn, job_id: uuid.UUID, paused: bool, *, now: datetime) -> None:
    """Pause or resume a ScheduledJob's job (the operator, for `spec.suspend`)."""
    if paused:
        await pause_job(conn, job_id, now=now, by=JobSource.CRD)
    else:
        await resume_job(conn, job_id, now=now, by=JobSource.CRD)


@translated
async def trigger_job(
    conn: Conn, job_id: uuid.UUID, *, now: datetime, tenant: str | None = None
) -> uuid.UUID:
    """One extra occurrence now, outside the schedule. Returns the execution id."""
    async with conn.transaction():
        row = await _locked(conn, job_id, tenant)
        if row.state != JobState.ACTIVE:
            raise Conflict(f"job {job_id} is {row.state}: only an active job can be triggered")
        execution_id = await insert_execution(
            conn,
            job_id=job_id,
            tenant=row.tenant,
            task=row.task,
            shard=row.shard,
            due_at=now,
            occurrence_at=now,
            attempt=1,
            job_version=row.spec_version,
            now=now,
        )
        if execution_id is None:
            raise Conflict(f"job {job_id} already has an occurrence at {now.isoformat()}")
        return execution_id


RERUNNABLE = frozenset({ExecutionStatus.DEAD, ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT})
"""Final failures a user may run again by hand."""


@translated
async def rerun_execution(
    conn: Conn, execution_id: uuid.UUID, *, now: datetime, tenant: str | None = None
) -> uuid.UUID:
    """Run a failed occurrence again, now: one more attempt of the same occurrence (so its
    handler sees the same idempotency key), whatever the job's schedule and even when the
    job is `completed` (a one-off: live again, within its tenant's quotas). Only the
    occurrence's latest attempt, and only once it ended dead, failed or timed out; not for a
    paused or cancelled job. Returns the new execution's id."""
    async with conn.transaction():
        record = await conn.fetchrow(Q["get_execution"], execution_id, tenant)
        if record is None:
            raise NotFound(f"execution {execution_id} not found")
        found = execution_of(record)
        job = await _locked(conn, found.job_id, tenant)
        if job.state in (JobState.PAUSED, JobState.CANCELLED):
            raise Conflict(
                f"job {job.id} is {job.state}: resume it (or create a new job) to run"
                " an occurrence again"
            )
        # Read again under the job's lock: two re-runs at once find each other's attempt.
        latest = await conn.fetchrow(Q["latest_attempt"], found.job_id, found.occurrence_at)
        assert latest is not None
        if latest["attempt"] != found.attempt:
            raise Conflict(
                f"execution {execution_id} is attempt {found.attempt} of its occurrence;"
                f" attempt {latest['attempt']} ({latest['id']}) is the latest: re-run that one"
            )
        if ExecutionStatus(latest["status"]) not in RERUNNABLE:
            raise Conflict(
                f"execution {execution_id} is {latest['status']}: only a dead, failed or"
                " timed-out execution can be run again"
            )
        if job.state == JobState.COMPLETED:
            # Claims run only active jobs' executions; the re-run's outcome completes the
            # one-off again. Live until then, it counts against its tenant's quotas.
            await quotas.check(conn, [(job.tenant, 1, job.fires_per_minute)])
            await conn.execute(Q["set_job_state"], job.id, JobState.ACTIVE.value, now, now)
        new_id = await insert_execution(
            conn,
            job_id=job.id,
            tenant=job.tenant,
            task=job.task,
            shard=job.shard,
            due_at=now,
            occurrence_at=found.occurrence_at,
            attempt=found.attempt + 1,
            job_version=job.spec_version,
            now=now,
        )
        assert new_id is not None  # attempt > 1 is never deduplicated
        return new_id


@translated
async def cancel_job(
    conn: Conn,
    job_id: uuid.UUID,
    *,
    now: datetime,
    tenant: str | None = None,
    by: JobSource = JobSource.API,
) -> bool:
    """Cancel a job: pending executions cancelled, history kept. False if already cancelled."""
    async with conn.transaction():
        try:
            row = await _locked(conn, job_id, tenant, by=by)
        except NotFound:
            return False
        if row.state == JobState.CANCELLED:
            return False
        await conn.execute(Q["cancel_pending"], job_id, now, "cancelled", "job cancelled")
        await conn.execute(Q["cancel_running"], job_id)
        await conn.execute(Q["set_job_state"], job_id, JobState.CANCELLED.value, None, now)
        await conn.execute(Q["notify_job"], str(job_id))
        return True


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
async def cancel_crd_namesake(
    conn: Conn, tenant: str, name: str, *, keep: uuid.UUID, now: datetime
) -> None:
    """Cancel a live CRD job of this name whose resource was replaced while we were away."""
    old = await find_live_crd_job(conn, tenant, name)
    if old is not None and old != keep:
        await cancel_job(conn, old, now=now, by=JobSource.CRD)


@translated
async def set_tenant_limit(
    conn: Conn,
    tenant: str,
    max_running: int | None,
    *,
    max_jobs: int | None = None,
    max_fires_per_minute: int | None = None,
) -> TenantRow:
    """Replace a tenant's settings (None: no running limit; the default quota); returns
    the tenant as `list_tenants` shows it."""
    await conn.execute(Q["upsert_tenant"], tenant, max_running, max_jobs, max_fires_per_minute)
    [row] = await list_tenants(conn, tenant)
    return row


@translated
async def list_tenants(conn: Conn, name: str | None = None) -> list[TenantRow]:
    """Tenants with their settings, the quotas in force (defaults filled in) and their use."""
    tenants = []
    for r in await conn.fetch(Q["list_tenants"], name):
        max_jobs, max_rate = quotas.in_force(r["max_jobs"], r["max_fires_per_minute"])
        tenants.append(
            TenantRow(
                name=r["name"],
                max_running=r["max_running"],
                max_jobs=max_jobs,
                max_fires_per_minute=max_rate,
                running=r["running"],
                jobs=r["jobs"],
                fires_per_minute=r["fires_per_minute"],
            )
        )
    return tenants

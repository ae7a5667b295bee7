"""The job lifecycle, one transaction per operation: create (one or a batch), edit,
pause, resume, trigger, re-run, cancel; plus reads (a job, a tenant's jobs)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import asyncpg

from horae.errors import Conflict, NotFound
from horae.models import ExecutionStatus, JobSource, JobSpec, JobState
from horae.store import quotas
from horae.store.boundary import translated
from horae.store.new_jobs import NewJob, insert_jobs
from horae.store.occurrences import (
    Occurrence,
    catch_up,
    next_occurrence,
    rate,
)
from horae.store.queries import Q
from horae.store.reads import find_live_crd_job
from horae.store.rows import (
    ExecutionRow,
    JobRow,
    execution_of,
    job_of,
    pause_after_failures,
    stored_retry_policy,
)
from horae.store.scheduling import (
    insert_execution,
    new_execution_id,
    schedule_occurrence,
)

if TYPE_CHECKING:
    from horae.store.db import Conn


@translated
async def create_jobs(
    conn: Conn,
    jobs: Sequence[NewJob],
    *,
    shards: int,
    now: datetime,
    elsewhere: quotas.Elsewhere | None = None,
) -> None:
    """Insert jobs and their first executions, within their tenants' quotas (QuotaExceeded
    otherwise, and nothing is written): one statement that checks the quotas by the
    tenants' use bounds; when one needs counting (near its quota), the statement again in a
    transaction, then the count (`quotas.check`). Conflict when a
    job's id or Idempotency-Key is taken; ShardMoved when a job's shard moved to another
    store group (nothing is written: the caller re-reads the catalog). `elsewhere`: the
    tenants' use in the other store groups (`routing.create_jobs` reads it)."""
    try:
        if not conn.is_in_transaction():
            # The quota checked by the tenants' use bounds, in the same statement; near a
            # quota, or with no bound kept yet, counted below.
            with contextlib.suppress(quotas.ToCount):
                await insert_jobs(
                    conn, jobs, shards=shards, now=now, checked=True, elsewhere=elsewhere
                )
                return
        async with conn.transaction():
            await insert_jobs(conn, jobs, shards=shards, now=now)
            adding = [(j.tenant, 1, rate(j.spec)) for j in jobs]
            await quotas.check(conn, adding, elsewhere, locked=True)
    except asyncpg.UniqueViolationError as exc:
        # A concurrent create took one of these ids or Idempotency-Keys first.
        raise Conflict("a job with this id or Idempotency-Key exists") from exc


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
    elsewhere: quotas.Elsewhere | None = None,
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
    await create_jobs(conn, [job], shards=shards, now=now, elsewhere=elsewhere)
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
    """The job's row, locked for the transaction (its unfinished executions first, in the
    order every other writer locks them). `by`: who changes it, refused (Conflict)
    unless the job is theirs: a ScheduledJob's job is its manifest's (the operator would
    bring back whatever the API or CLI changed, and a cancel would leave the resource
    retrying forever), and the operator never changes a job made through the API."""
    await conn.execute(Q["lock_job_executions"], job_id, tenant)
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


async def _told(conn: Conn, row: JobRow) -> None:
    """Tell the operators a ScheduledJob's job changed (its status mirror rewrites the
    resource's status from the store, at commit). Without it a mirror write that read the
    job just before the change would stand: a pause ends the runs that would report again."""
    if row.source == JobSource.CRD:
        await conn.execute(Q["notify_job"], str(row.id))


@translated
async def edit_job(
    conn: Conn,
    job_id: uuid.UUID,
    spec: JobSpec,
    *,
    now: datetime,
    tenant: str | None = None,
    by: JobSource = JobSource.API,
    elsewhere: quotas.Elsewhere | None = None,
) -> int:
    """Replace the spec (version + 1), cancel pending executions, schedule the next one.
    `by`: the API (and CLI) or the operator, each changing only its own jobs; `elsewhere`:
    the tenant's use in the other store groups."""
    async with conn.transaction():
        row = await _locked(conn, job_id, tenant, by=by)
        if row.state == JobState.CANCELLED:
            raise Conflict(f"job {job_id} is cancelled")
        revived = row.state == JobState.COMPLETED  # an edit makes a completed job active
        added = rate(spec) - (0.0 if revived else row.fires_per_minute)
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
            stored_retry_policy(spec.retry.model_dump()),
            spec.timeout_seconds,
            spec.concurrency_policy.value,
            spec.starting_deadline_seconds,
            nxt.occurrence_at if nxt else None,
            now,
            spec.catch_up.value,
            rate(spec),
            spec.catch_up_window_seconds,
            pause_after_failures(spec),
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
        await quotas.check(conn, [(row.tenant, int(revived), max(0.0, added))], elsewhere)
        await _told(conn, row)
        return int(version)


@translated
async def pause_job(
    conn: Conn,
    job_id: uuid.UUID,
    *,
    now: datetime,
    tenant: str | None = None,
    by: JobSource = JobSource.API,
    reason: str | None = None,
) -> None:
    """Pause, recording `reason` (the caller checked it: `limits.pause_reason_error`):
    pending executions are cancelled (reason: paused). Pausing a paused job only records
    the reason given (a job its failure policy paused is then paused by hand)."""
    async with conn.transaction():
        row = await _locked(conn, job_id, tenant, by=by)
        state = JobState(row.state)
        if state == JobState.PAUSED:
            if reason is not None or row.paused_for_failures:
                kept = reason if reason is not None else row.paused_reason
                await conn.execute(Q["set_paused_reason"], job_id, kept)
                await _told(conn, row)
            return
        if state != JobState.ACTIVE:
            raise Conflict(f"job {job_id} is {state.value}: only an active job can be paused")
        await conn.execute(Q["cancel_pending"], job_id, now, "paused", "job paused")
        await conn.execute(Q["set_job_state"], job_id, JobState.PAUSED.value, None, now)
        await conn.execute(Q["set_paused_reason"], job_id, reason)
        await _told(conn, row)


async def _catch_up(conn: Conn, job: JobRow, now: datetime) -> Occurrence | None:
    """Record what a resumed cron job missed while paused (`catch_up`, kind `paused`), and
    answer the occurrence to schedule: the first that catch-up runs, due now (the others it
    runs follow one by one through the scheduler), or the first after the pause."""
    gap = catch_up(job.id, job.spec, after=job.paused_at or job.updated_at, now=now, paused=True)
    if gap.skipped:
        await conn.execute(
            Q["insert_skipped"],
            [new_execution_id() for _ in gap.skipped],
            [job.id] * len(gap.skipped),
            [job.tenant] * len(gap.skipped),
            [job.task] * len(gap.skipped),
            [job.shard] * len(gap.skipped),
            [s.occurrence.occurrence_at for s in gap.skipped],
            [job.spec_version] * len(gap.skipped),
            now,
            ["paused"] * len(gap.skipped),
            [s.message for s in gap.skipped],
        )
    if gap.runs:
        return Occurrence(gap.runs[0].occurrence_at, max(gap.runs[0].due_at, now))
    return gap.resume


@translated
async def resume_job(
    conn: Conn,
    job_id: uuid.UUID,
    *,
    now: datetime,
    tenant: str | None = None,
    by: JobSource = JobSource.API,
) -> None:
    """Resume from now. What the job missed while paused runs as its catch-up policy and
    window say (`occurrences.catch_up`), the first of it now; the most recent
    `MAX_SKIPPED_ROWS` of the others are recorded `skipped` (kind `paused`); older ones
    leave no row. A one-off that was missed runs now.
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
            nxt = await _catch_up(conn, row, now)
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
        await _told(conn, row)


@translated
async def set_paused(
    conn: Conn, job_id: uuid.UUID, paused: bool, *, now: datetime, reason: str | None = None
) -> None:
    """Pause (with `reason`) or resume a ScheduledJob's job (the operator, for
    `spec.suspend`)."""
    if paused:
        await pause_job(conn, job_id, now=now, by=JobSource.CRD, reason=reason)
    else:
        await resume_job(conn, job_id, now=now, by=JobSource.CRD)


@translated
async def trigger_job(
    conn: Conn, job_id: uuid.UUID, *, now: datetime, tenant: str | None = None
) -> uuid.UUID:
    """One extra occurrence now, outside the schedule, recorded as manual (and so are its
    retries). Returns the execution id."""
    async with conn.transaction():
        row = await _locked(conn, job_id, tenant)
        if row.state != JobState.ACTIVE:
            raise Conflict(f"job {job_id} is {row.state}: only an active job can be triggered")
        return await _run_now(conn, row, now)


@translated
async def trigger_once(
    conn: Conn, job_id: uuid.UUID, value: str, *, now: datetime, run: bool = True
) -> uuid.UUID | None:
    """A ScheduledJob's `horae.dev/trigger` annotation `value`: the job's last value becomes
    `value`, and if it was another one manual occurrence runs now (its execution id is
    returned). None when the job already had `value`: a value runs once, however often the
    operator sees it. `run=False` records `value` without running (the value a ScheduledJob
    was created with). A job that is not active records `value` and raises Conflict."""
    async with conn.transaction():
        row = await _locked(conn, job_id, None, by=JobSource.CRD)
        if row.manual_trigger == value:
            return None
        await conn.execute(Q["set_manual_trigger"], job_id, value)
        if not run:
            return None
        if row.state == JobState.ACTIVE:
            return await _run_now(conn, row, now)
    raise Conflict(f"job {job_id} is {row.state}: only an active job can be triggered")


async def _run_now(conn: Conn, row: JobRow, now: datetime) -> uuid.UUID:
    """A manual occurrence of the locked job `row`, due `now`."""
    execution_id = await insert_execution(
        conn,
        job_id=row.id,
        tenant=row.tenant,
        task=row.task,
        shard=row.shard,
        due_at=now,
        occurrence_at=now,
        attempt=1,
        job_version=row.spec_version,
        now=now,
        manual=True,
    )
    if execution_id is None:
        raise Conflict(f"job {row.id} already has an occurrence at {now.isoformat()}")
    return execution_id


RERUNNABLE = frozenset({ExecutionStatus.DEAD, ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT})
"""Final failures a user may run again by hand."""


@translated
async def rerun_execution(
    conn: Conn,
    execution_id: uuid.UUID,
    *,
    now: datetime,
    tenant: str | None = None,
    elsewhere: quotas.Elsewhere | None = None,
    found_elsewhere: ExecutionRow | None = None,
) -> uuid.UUID:
    """Run a failed occurrence again, now: one more attempt of the same occurrence (so its
    handler sees the same idempotency key), whatever the job's schedule and even when the
    job is `completed` (a one-off: live again, within its tenant's quotas). Only the
    occurrence's latest attempt, and only once it ended dead, failed or timed out; not for a
    paused or cancelled job. Returns the new execution's id.

    `conn` is the job's store group. An execution ended before its job's shard moved to that
    group stays as history in the group it ran in: the caller found it there
    (`found_elsewhere`), and the new attempt is made here, beside the job."""
    async with conn.transaction():
        record = await conn.fetchrow(Q["get_execution"], execution_id, tenant)
        if record is not None:
            found = execution_of(record)
        elif found_elsewhere is not None and found_elsewhere.id == execution_id:
            found = found_elsewhere
        else:
            raise NotFound(f"execution {execution_id} not found")
        job = await _locked(conn, found.job_id, tenant)
        if job.state in (JobState.PAUSED, JobState.CANCELLED):
            raise Conflict(
                f"job {job.id} is {job.state}: resume it (or create a new job) to run"
                " an occurrence again"
            )
        # Read again under the job's lock: two re-runs at once find each other's attempt.
        # (Attempts made since the move are all here: none, when the one found elsewhere
        # is the latest.)
        latest = await conn.fetchrow(Q["latest_attempt"], found.job_id, found.occurrence_at)
        if latest is not None and latest["attempt"] != found.attempt:
            raise Conflict(
                f"execution {execution_id} is attempt {found.attempt} of its occurrence;"
                f" attempt {latest['attempt']} ({latest['id']}) is the latest: re-run that one"
            )
        status = found.status if latest is None else ExecutionStatus(latest["status"])
        if status not in RERUNNABLE:
            raise Conflict(
                f"execution {execution_id} is {status}: only a dead, failed or"
                " timed-out execution can be run again"
            )
        if job.state == JobState.COMPLETED:
            # Claims run only active jobs' executions; the re-run's outcome completes the
            # one-off again. Live until then, it counts against its tenant's quotas.
            await conn.execute(Q["set_job_state"], job.id, JobState.ACTIVE.value, now, now)
            await quotas.check(conn, [(job.tenant, 1, job.fires_per_minute)], elsewhere)
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
            manual=found.manual,
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
        await _told(conn, row)
        return True


@translated
async def cancel_crd_namesake(
    conn: Conn, tenant: str, name: str, *, keep: uuid.UUID, now: datetime
) -> None:
    """Cancel a live CRD job of this name whose resource was replaced while we were away."""
    old = await find_live_crd_job(conn, tenant, name)
    if old is not None and old != keep:
        await cancel_job(conn, old, now=now, by=JobSource.CRD)

"""A job's failure policy and pause reasons, in the store: consecutive final failures pause
the job (whoever records them, a worker or the reaper), a success resets the count, and a
paused job says why."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from horae.models import ExecutionStatus, FailurePolicy, JobSource, JobSpec
from horae.store import dispatch, executions, jobs
from tests.support import transitions

pytestmark = pytest.mark.one_group

NOW = datetime.now(UTC).replace(microsecond=0)
LEASE = timedelta(seconds=30)
YEARLY = "0 0 1 1 *"
_SECONDS = itertools.count(1)
"""Each manual run is a second later than the last: one occurrence per instant."""


async def failing_job(conn: asyncpg.Connection, pause_after: int = 2) -> uuid.UUID:
    """A yearly cron job of tenant acme that pauses after `pause_after` failures."""
    spec = JobSpec(
        task="t",
        cron=YEARLY,
        retry={"max_attempts": 2},
        failure_policy=FailurePolicy(pause_after_consecutive_failures=pause_after),
    )
    return await jobs.create_job(
        conn, spec, tenant="acme", source=JobSource.API, shards=64, now=NOW
    )


async def run_once(
    conn: asyncpg.Connection,
    job_id: uuid.UUID,
    status: ExecutionStatus,
    *,
    retry_at: datetime | None = None,
    message: str = "boom",
) -> executions.Claimed:
    """Trigger the job, claim the run and record `status` (retried at `retry_at`)."""
    at = NOW + timedelta(seconds=next(_SECONDS))
    execution_id = await jobs.trigger_job(conn, job_id, now=at)
    claimed = await transitions.claim(
        conn, execution_id, at, owner="w1", now=at, lease=LEASE, tenant="acme"
    )
    assert isinstance(claimed, executions.Claimed)
    failed = status != ExecutionStatus.SUCCEEDED
    assert await transitions.finish(
        conn,
        claimed,
        owner="w1",
        status=status,
        now=NOW,
        error_kind="ValueError" if failed else None,
        error_message=message if failed else None,
        retry_at=retry_at,
    )
    return claimed


async def job_row(pool: asyncpg.Pool, job_id: uuid.UUID) -> asyncpg.Record:
    row = await pool.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id)
    assert row is not None
    return row


async def test_two_final_failures_in_a_row_pause_the_job_and_cancel_what_was_pending(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        job_id = await failing_job(conn)
        await run_once(conn, job_id, ExecutionStatus.FAILED)
        assert (await job_row(pool, job_id))["state"] == "active"
        last = await run_once(conn, job_id, ExecutionStatus.DEAD, message="out of tries")
    job = await job_row(pool, job_id)
    assert (job["state"], job["consecutive_failures"], job["paused_for_failures"]) == (
        "paused", 2, True)  # fmt: skip
    assert job["paused_reason"] == (
        f"paused after 2 consecutive failures (last: execution {last.id} dead: out of tries)"
    )
    assert job["next_run_at"] is None and job["paused_at"] == NOW
    # the next yearly occurrence was pending: cancelled as a pause by hand cancels it
    pending = await pool.fetch(
        "SELECT status, error_kind FROM executions WHERE job_id = $1 AND NOT manual", job_id
    )
    assert [(r["status"], r["error_kind"]) for r in pending] == [("cancelled", "paused")]


async def test_a_retried_attempt_does_not_count_and_a_success_resets_the_count(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        job_id = await failing_job(conn)
        await run_once(conn, job_id, ExecutionStatus.FAILED)
        # a failure with a retry to follow is not an outcome yet
        await run_once(conn, job_id, ExecutionStatus.FAILED, retry_at=NOW + timedelta(hours=1))
        assert (await job_row(pool, job_id))["consecutive_failures"] == 1
        await run_once(conn, job_id, ExecutionStatus.SUCCEEDED)
        assert (await job_row(pool, job_id))["consecutive_failures"] == 0
        await run_once(conn, job_id, ExecutionStatus.TIMED_OUT)
    job = await job_row(pool, job_id)
    assert (job["state"], job["consecutive_failures"]) == ("active", 1)


async def test_a_death_the_reaper_finds_counts_as_a_failure(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        job_id = await failing_job(conn)
        await run_once(conn, job_id, ExecutionStatus.FAILED)
        # the second run's worker stops heartbeating: the reaper ends its last attempt dead
        execution_id = await jobs.trigger_job(conn, job_id, now=NOW - timedelta(seconds=1))
        row = await conn.fetchrow("SELECT * FROM executions WHERE id = $1", execution_id)
        claimed = await transitions.claim(
            conn, execution_id, row["due_at"], owner="w1", now=NOW, lease=LEASE, tenant="acme"
        )
        assert isinstance(claimed, executions.Claimed)
        epoch = await dispatch.take_shard(conn, claimed.shard, "s1", NOW)
        assert epoch is not None
        later = NOW + LEASE + timedelta(seconds=1)
        [expired] = await dispatch.expired_running(conn, [claimed.shard], later, 10)
        assert await dispatch.lose_lease(conn, expired, epoch=epoch, now=later, retry_at=None)
    job = await job_row(pool, job_id)
    assert (job["state"], job["consecutive_failures"]) == ("paused", 2)
    assert job["paused_reason"] == (
        f"paused after 2 consecutive failures (last: execution {execution_id} dead:"
        " worker w1 stopped heartbeating)"
    )


async def test_resuming_forgets_the_reason_and_counts_afresh(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        job_id = await failing_job(conn, pause_after=1)
        await run_once(conn, job_id, ExecutionStatus.FAILED)
        assert (await job_row(pool, job_id))["state"] == "paused"
        await jobs.resume_job(conn, job_id, now=NOW)
    job = await job_row(pool, job_id)
    assert (job["state"], job["consecutive_failures"]) == ("active", 0)
    assert (job["paused_reason"], job["paused_for_failures"]) == (None, False)


async def test_a_pause_records_the_reason_given_and_a_second_pause_replaces_it(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        job_id = await failing_job(conn, pause_after=1)
        await jobs.pause_job(conn, job_id, now=NOW, reason="waiting for the vendor's fix")
        assert (await job_row(pool, job_id))["paused_reason"] == "waiting for the vendor's fix"
        await jobs.pause_job(conn, job_id, now=NOW, reason="INC-42")
    job = await job_row(pool, job_id)
    assert (job["state"], job["paused_reason"], job["paused_for_failures"]) == (
        "paused", "INC-42", False)  # fmt: skip

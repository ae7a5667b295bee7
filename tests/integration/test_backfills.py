"""Backfills in the store, fed by the scheduler's feeder, on a real PostgreSQL: what a slice
inserts, that a backfilled row never schedules its job's next occurrence (neither through
the scheduler's record of a dispatch nor through a worker's claim, `horae_schedule_next`),
that an occurrence with a run is left alone, Forbid overlap, and a cancel."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from horae.domain.backfills import Overlap
from horae.models import JobSource, JobSpec
from horae.scheduler.backfill import Feeder
from horae.store import backfills, dispatch, jobs
from horae.store.backfills import NewBackfill
from horae.store.db import Database
from horae.store.queries import Q

pytestmark = pytest.mark.one_group

HOUR = timedelta(hours=1)


def top_of_hour() -> datetime:
    return datetime.now(UTC).replace(minute=0, second=0, microsecond=0)


async def hourly_job(pool: asyncpg.Pool) -> uuid.UUID:
    async with pool.acquire() as conn:
        return await jobs.create_job(
            conn, JobSpec(task="t", cron="0 * * * *"), tenant="acme", source=JobSource.API,
            shards=64, now=datetime.now(UTC),
        )  # fmt: skip


async def feeder_of(pool: asyncpg.Pool, job_id: uuid.UUID) -> Feeder:
    """A feeder holding the job's shard (a fresh epoch), as the shard's scheduler would."""
    shard = job_id.int % 64
    async with pool.acquire() as conn:
        epoch = await dispatch.take_shard(conn, shard, "test", datetime.now(UTC))
    return Feeder(Database(pool), epochs=lambda: {shard: epoch})


async def backfill(
    pool: asyncpg.Pool, job_id: uuid.UUID, hours: int, *, rate: int = 1000,
    overlap: Overlap = Overlap.ALLOW,
) -> backfills.BackfillRow:  # fmt: skip
    end = top_of_hour()
    new = NewBackfill(job_id, end - hours * HOUR, end, rate, overlap)
    async with pool.acquire() as conn:
        return await backfills.create_backfill(conn, new, now=datetime.now(UTC))


async def owe_a_second(pool: asyncpg.Pool, backfill_id: uuid.UUID) -> None:
    """A second passes for the backfill's rate (its clock moved back, not slept)."""
    await pool.execute(
        "UPDATE backfills SET fed_at = fed_at - interval '1 s' WHERE id = $1", backfill_id
    )


async def tagged(pool: asyncpg.Pool, backfill_id: uuid.UUID) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT * FROM executions WHERE backfill = $1 ORDER BY occurrence_at", backfill_id
    )


async def test_backfilled_rows_are_due_now_and_never_schedule_the_jobs_next_occurrence(
    pool: asyncpg.Pool,
) -> None:
    job_id = await hourly_job(pool)
    [own] = await pool.fetch("SELECT * FROM executions WHERE job_id = $1", job_id)
    b = await backfill(pool, job_id, 3)
    assert b.total == 3 and b.created == 0
    feeder = await feeder_of(pool, job_id)
    await owe_a_second(pool, b.id)
    assert await feeder.round() == 3
    rows = await tagged(pool, b.id)
    end = top_of_hour()
    assert [r["occurrence_at"] for r in rows] == [end - 3 * HOUR, end - 2 * HOUR, end - HOUR]
    assert all(r["attempt"] == 1 and r["status"] == "scheduled" for r in rows)
    assert all(r["due_at"] > end and r["concurrency_policy"] == "Allow" for r in rows)

    # The scheduler's preload sees the tag, and its record of their dispatch schedules no
    # next occurrence from them (the job's own one, an hour ahead, schedules the next).
    shard = job_id.int % 64
    async with pool.acquire() as conn:
        due = await dispatch.preload(conn, [shard], datetime.now(UTC) + HOUR, 1000)
        mine = [d for d in due if d.job_id == job_id]
        assert {d.backfill for d in mine} == {b.id, None}
        epoch = await conn.fetchval("SELECT epoch FROM shard_epochs WHERE shard = $1", shard)
        plan = dispatch.ShardDispatch(epoch, published=[d for d in mine if d.backfill])
        assert await dispatch.record_dispatch(conn, {shard: plan}, datetime.now(UTC)) == (3, set())
    assert len(await pool.fetch("SELECT 1 FROM executions WHERE job_id = $1", job_id)) == 4

    # A worker's claim that finds a row still `scheduled` schedules its successor
    # (horae_schedule_next): never for a backfilled one; the job's own row still does.
    await pool.execute(
        "UPDATE executions SET status = 'running', lease_owner = 'w', lease_until = now(),"
        " started_at = now() WHERE job_id = $1",
        job_id,
    )
    now = datetime.now(UTC)
    nxt = own["occurrence_at"] + HOUR
    for row, inserted in ((rows[-1], 0), (own, 1)):
        n = await pool.fetchval(
            Q["schedule_claimed_next"], "w", [row["id"]], [row["due_at"]], [uuid.uuid4()],
            [nxt], [nxt], now, now,
        )  # fmt: skip
        assert n == inserted
    job = await pool.fetchrow("SELECT next_run_at FROM jobs WHERE id = $1", job_id)
    assert job["next_run_at"] == nxt


async def test_an_occurrence_that_ran_is_not_backfilled_again(pool: asyncpg.Pool) -> None:
    job_id = await hourly_job(pool)
    ran = top_of_hour() - 2 * HOUR
    await pool.execute(
        "INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at,"
        " attempt, job_version, status, created_at, finished_at)"
        " VALUES ($1, $2, 'acme', 't', $3, $4, $4, 1, 1, 'succeeded', $4, $4)",
        uuid.uuid4(), job_id, job_id.int % 64, ran,
    )  # fmt: skip
    b = await backfill(pool, job_id, 4)
    feeder = await feeder_of(pool, job_id)
    await owe_a_second(pool, b.id)
    assert await feeder.round() == 3
    assert ran not in [r["occurrence_at"] for r in await tagged(pool, b.id)]
    async with pool.acquire() as conn:
        after = await backfills.get_backfill(conn, b.id)
    assert after is not None and (after.created, after.existing, after.fed) == (3, 1, True)


async def test_forbid_overlap_feeds_the_next_occurrence_once_the_previous_ended(
    pool: asyncpg.Pool,
) -> None:
    job_id = await hourly_job(pool)
    b = await backfill(pool, job_id, 3, overlap=Overlap.FORBID)
    feeder = await feeder_of(pool, job_id)
    await owe_a_second(pool, b.id)
    assert await feeder.round() == 1
    await owe_a_second(pool, b.id)
    assert await feeder.round() == 0  # the first still waits to run
    await pool.execute(
        "UPDATE executions SET status = 'succeeded', finished_at = now() WHERE backfill = $1",
        b.id,
    )
    await owe_a_second(pool, b.id)
    assert await feeder.round() == 1
    assert len(await tagged(pool, b.id)) == 2


async def test_a_cancel_ends_the_scheduled_rows_and_stops_feeding(pool: asyncpg.Pool) -> None:
    job_id = await hourly_job(pool)
    b = await backfill(pool, job_id, 48, rate=10)
    feeder = await feeder_of(pool, job_id)
    await owe_a_second(pool, b.id)
    assert await feeder.round() == 10  # a second's worth at 10/s, not the 48
    async with pool.acquire() as conn:
        assert await backfills.cancel_backfill(conn, b.id, now=datetime.now(UTC), tenant="acme")
        assert not await backfills.cancel_backfill(conn, b.id, now=datetime.now(UTC))
    await owe_a_second(pool, b.id)
    assert await feeder.round() == 0
    rows = await tagged(pool, b.id)
    assert len(rows) == 10
    assert {(r["status"], r["error_kind"], r["error_message"]) for r in rows} == {
        ("cancelled", "cancelled", "backfill cancelled")
    }
    async with pool.acquire() as conn:
        after = await backfills.get_backfill(conn, b.id)
    assert after is not None and after.state == "cancelled" and after.created == 10


async def test_a_backfill_fed_to_its_end_completes_once_its_executions_ended(
    pool: asyncpg.Pool,
) -> None:
    job_id = await hourly_job(pool)
    b = await backfill(pool, job_id, 2)
    feeder = await feeder_of(pool, job_id)
    await owe_a_second(pool, b.id)
    await feeder.round()
    await feeder.round()
    assert await pool.fetchval("SELECT state FROM backfills WHERE id = $1", b.id) == "running"
    await pool.execute(
        "UPDATE executions SET status = 'succeeded', finished_at = now() WHERE backfill = $1",
        b.id,
    )
    await feeder.round()
    async with pool.acquire() as conn:
        after = await backfills.get_backfill(conn, b.id)
    assert after is not None and after.state == "completed" and after.finished_at is not None
    assert after.outcomes == {"succeeded": 2}

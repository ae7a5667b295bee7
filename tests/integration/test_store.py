"""The job store's transitions on a real PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg

from horae.models import JobSource, JobSpec
from horae.store import executions, jobs
from horae.store.db import connect

NOW = datetime.now(UTC).replace(microsecond=0)


def cron_spec(expr: str = "*/10 * * * * *") -> JobSpec:
    return JobSpec(task="t", cron=expr)


async def rows(pool: asyncpg.Pool, job_id: uuid.UUID) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT * FROM executions WHERE job_id = $1 ORDER BY due_at, created_at", job_id
    )


async def test_create_inserts_the_job_and_its_first_execution(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        job_id = await jobs.create_job(
            conn, cron_spec("0 * * * *"), tenant="acme", source=JobSource.API, shards=64,
            now=NOW,
        )  # fmt: skip
    job = await pool.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id)
    assert job["state"] == "active" and job["spec_version"] == 1
    assert job["shard"] == job_id.int % 64
    [execution] = await rows(pool, job_id)
    top_of_hour = (NOW + timedelta(hours=1)).replace(minute=0, second=0)
    assert execution["status"] == "scheduled"
    assert execution["due_at"] == execution["occurrence_at"] == top_of_hour
    assert execution["shard"] == job["shard"] and execution["attempt"] == 1


async def test_near_term_execution_notifies_its_shard(pool: asyncpg.Pool, db_url: str) -> None:
    spec = JobSpec(task="t", run_at=NOW + timedelta(seconds=5))
    job_id = uuid.uuid4()
    shard = job_id.int % 64
    listener = await connect(db_url)
    heard: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener(f"horae_shard_{shard}", lambda *a: heard.put_nowait(a[3]))
    try:
        async with pool.acquire() as conn:
            await jobs.create_job(
                conn, spec, tenant="acme", source=JobSource.API, shards=64, now=NOW,
                job_id=job_id,
            )  # fmt: skip
        payload = await asyncio.wait_for(heard.get(), timeout=5)
        [execution] = await rows(pool, job_id)
        assert payload == str(execution["id"])
    finally:
        await listener.close()


async def test_edit_cancels_pending_and_schedules_from_the_new_spec(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        job_id = await jobs.create_job(
            conn, cron_spec("0 * * * *"), tenant="acme", source=JobSource.API, shards=64,
            now=NOW,
        )  # fmt: skip
        version = await jobs.edit_job(conn, job_id, cron_spec("30 * * * *"), now=NOW)
    assert version == 2
    old, new = sorted(await rows(pool, job_id), key=lambda r: r["job_version"])
    assert old["status"] == "cancelled" and old["error_kind"] == "superseded"
    assert new["status"] == "scheduled" and new["job_version"] == 2
    assert new["due_at"].minute == 30


async def test_pause_cancels_pending_and_resume_schedules_from_now(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        job_id = await jobs.create_job(
            conn, cron_spec("0 * * * *"), tenant="acme", source=JobSource.API, shards=64,
            now=NOW,
        )  # fmt: skip
        await jobs.set_paused(conn, job_id, True, now=NOW)
        assert [r["status"] for r in await rows(pool, job_id)] == ["cancelled"]
        assert await pool.fetchval("SELECT state FROM jobs WHERE id = $1", job_id) == "paused"
        later = NOW + timedelta(hours=3)
        await jobs.set_paused(conn, job_id, False, now=later)
    statuses = [(r["status"], r["due_at"]) for r in await rows(pool, job_id)]
    assert statuses[-1] == ("scheduled", (later + timedelta(hours=1)).replace(minute=0, second=0))
    assert await pool.fetchval("SELECT state FROM jobs WHERE id = $1", job_id) == "active"


async def test_cancel_keeps_history(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        job_id = await jobs.create_job(
            conn, cron_spec(), tenant="acme", source=JobSource.API, shards=64, now=NOW
        )
        assert await jobs.cancel_job(conn, job_id, now=NOW) is True
        assert await jobs.cancel_job(conn, job_id, now=NOW) is False
    [execution] = await rows(pool, job_id)
    assert execution["status"] == "cancelled" and execution["finished_at"] is not None
    assert await pool.fetchval("SELECT state FROM jobs WHERE id = $1", job_id) == "cancelled"


async def test_fenced_write_under_a_stale_epoch_changes_nothing(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        job_id = await jobs.create_job(
            conn, cron_spec(), tenant="acme", source=JobSource.API, shards=64, now=NOW
        )
        shard = job_id.int % 64
        old_epoch = await executions.take_shard(conn, shard, "replica-a", NOW)
        new_epoch = await executions.take_shard(conn, shard, "replica-b", NOW)
        assert new_epoch == old_epoch + 1
        due = await executions.preload(conn, [shard], NOW + timedelta(minutes=5), 100)
        assert [d.job_id for d in due] == [job_id]
        assert await executions.mark_queued(conn, shard, old_epoch, due, NOW) is None
        assert (await rows(pool, job_id))[0]["status"] == "scheduled"
        assert await executions.mark_queued(conn, shard, new_epoch, due, NOW) == 1
    statuses = [r["status"] for r in await rows(pool, job_id)]
    assert statuses == ["queued", "scheduled"], "dispatching a cron occurrence schedules the next"


async def test_claim_runs_once_and_stale_executions_are_cancelled(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        job_id = await jobs.create_job(
            conn, cron_spec(), tenant="acme", source=JobSource.API, shards=64, now=NOW
        )
        [first] = await rows(pool, job_id)
        lease = timedelta(seconds=30)
        claimed = await executions.claim(
            conn, first["id"], first["due_at"], owner="w1", now=NOW, lease=lease
        )
        assert claimed is not None and claimed.attempt == 1
        again = await executions.claim(
            conn, first["id"], first["due_at"], owner="w2", now=NOW, lease=lease
        )
        assert again is None, "a duplicate message must not claim twice"

        await jobs.edit_job(conn, job_id, cron_spec("*/20 * * * * *"), now=NOW)
        pending = [r for r in await rows(pool, job_id) if r["status"] == "scheduled"]
        await pool.execute(
            "UPDATE executions SET status = 'queued' WHERE id = $1", pending[0]["id"]
        )
        await pool.execute("UPDATE jobs SET state = 'paused' WHERE id = $1", job_id)
        stale = await executions.claim(
            conn, pending[0]["id"], pending[0]["due_at"], owner="w1", now=NOW, lease=lease
        )
        assert stale is None
    row = await pool.fetchrow("SELECT * FROM executions WHERE id = $1", pending[0]["id"])
    assert row["status"] == "cancelled" and row["error_kind"] == "stale"


async def test_an_edit_keeping_the_schedule_still_schedules_the_next_occurrence(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        job_id = await jobs.create_job(
            conn, cron_spec("0 * * * *"), tenant="acme", source=JobSource.API, shards=64,
            now=NOW,
        )  # fmt: skip
        edited = JobSpec(task="t", cron="0 * * * *", payload={"v": 2})
        await jobs.edit_job(conn, job_id, edited, now=NOW)
        await jobs.set_paused(conn, job_id, True, now=NOW)
        await jobs.set_paused(conn, job_id, False, now=NOW)
    found = [(r["status"], r["job_version"]) for r in await rows(pool, job_id)]
    assert sorted(found) == [("cancelled", 1), ("cancelled", 2), ("scheduled", 2)]


async def test_scheduling_the_same_occurrence_twice_is_harmless(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        job_id = await jobs.create_job(
            conn, cron_spec(), tenant="acme", source=JobSource.API, shards=64, now=NOW
        )
        shard = job_id.int % 64
        epoch = await executions.take_shard(conn, shard, "replica-a", NOW)
        due = await executions.preload(conn, [shard], NOW + timedelta(minutes=5), 100)
        assert await executions.mark_queued(conn, shard, epoch, due, NOW) == 1
        # A second dispatch of the same batch (e.g. after a crash) queues nothing new
        # and schedules no second copy of the next occurrence.
        assert await executions.mark_queued(conn, shard, epoch, due, NOW) == 0
    assert [r["status"] for r in await rows(pool, job_id)] == ["queued", "scheduled"]

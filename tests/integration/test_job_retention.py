"""Ended jobs' rows go with the executions' retention (migration 025): the hourly maintenance,
run as the scheduler's role, deletes the jobs that ended before the oldest execution kept and
have nothing left, and keeps every job that may still be asked for; and the promises of
workers long gone."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from horae.models import ExecutionStatus, JobSource, JobSpec
from horae.store import jobs
from horae.store.db import connect
from horae.store.executions import Claimed
from horae.store.migrate import maintain_partitions, migrate
from tests.support import transitions

S = timedelta(seconds=1)
MINUTE = 60 * S


async def one_off_that_ran(
    conn: asyncpg.Connection, at: datetime, *, tenant: str, source: JobSource = JobSource.API
) -> uuid.UUID:
    """A one-off due `at`, claimed and succeeded then, through the store's own writes."""
    job_id = await jobs.create_job(
        conn,
        JobSpec(task="t", run_at=at),
        tenant=tenant,
        source=source,
        shards=64,
        now=at - MINUTE,
        name=f"once-{uuid.uuid4().hex[:8]}" if source == JobSource.CRD else None,
    )
    row = await conn.fetchrow("SELECT id, due_at FROM executions WHERE job_id = $1", job_id)
    assert row is not None
    claimed = await transitions.claim(
        conn, row["id"], row["due_at"], owner="w", now=at, lease=MINUTE, tenant=tenant
    )
    assert isinstance(claimed, Claimed)
    assert await transitions.finish(
        conn, claimed, owner="w", status=ExecutionStatus.SUCCEEDED, now=at + S
    )
    assert await conn.fetchval("SELECT state FROM jobs WHERE id = $1", job_id) == "completed"
    return job_id


async def cron_job(conn: asyncpg.Connection, cron: str, created: datetime) -> uuid.UUID:
    return await jobs.create_job(
        conn,
        JobSpec(task="t", cron=cron),
        tenant="acme",
        source=JobSource.API,
        shards=64,
        now=created,
    )


@pytest.mark.one_group
async def test_ended_jobs_are_deleted_with_their_history_and_live_or_referenced_ones_kept(
    db_url: str, role_urls: dict[str, str]
) -> None:
    today = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    old, recent = today - timedelta(days=40), today - timedelta(days=1)
    conn = await connect(db_url)
    scheduler = await connect(role_urls["scheduler"])
    try:
        for day in (old.date(), recent.date()):  # runs land in partitions retention drops
            await conn.fetchval("SELECT horae_create_partition($1)", day)
        ended = [await one_off_that_ran(conn, old, tenant="acme")]
        ended += [await one_off_that_ran(conn, old, tenant="beta") for _ in range(12)]
        cancelled = await cron_job(conn, "0 12 * * *", old - MINUTE)  # first run due `old`
        assert await jobs.cancel_job(conn, cancelled, now=old - 30 * S)
        ended.append(cancelled)
        # Its day has no partition: its run waits in the default one, which no partition drop
        # reaches; retention deletes it there (ended), and the job with it.
        in_default = await one_off_that_ran(conn, old - timedelta(days=2), tenant="acme")
        ended.append(in_default)
        kept = {
            "ended yesterday": await one_off_that_ran(conn, recent, tenant="acme"),
            "a ScheduledJob's one-off": await one_off_that_ran(
                conn, old, tenant="acme", source=JobSource.CRD
            ),
            "active": await cron_job(conn, "0 12 * * *", old - MINUTE),
            # cancelled long ago, but its next run (due next January 1st) is still stored
            "with an execution left": await cron_job(conn, "0 12 1 1 *", old - MINUTE),
            # due long ago, never run (in the default partition): a run still to start is
            # never deleted, whatever its due time
            "never run": await jobs.create_job(
                conn,
                JobSpec(task="t", run_at=old - timedelta(days=2)),
                tenant="acme",
                source=JobSource.API,
                shards=64,
                now=old - timedelta(days=2),
            ),
        }
        assert await jobs.cancel_job(conn, kept["with an execution left"], now=old)
        where = "SELECT tableoid::regclass::text FROM executions WHERE job_id = $1"
        for job_id in (in_default, kept["with an execution left"], kept["never run"]):
            assert await conn.fetchval(where, job_id) == "executions_default"
        # Promises of a worker pod gone 40 days ago, and of one alive.
        for owner, at in (("worker-gone", old), ("worker-alive", today)):
            await conn.execute(
                "INSERT INTO worker_promises (owner, alive_until, grace, written_at)"
                " VALUES ($1, $2, interval '2 seconds', $2)",
                owner,
                at,
            )
        assert (
            await conn.fetchval("SELECT count(*) FROM job_events WHERE job_id = $1", cancelled) > 0
        )

        # `horae migrate` (a Helm hook, which must end soon) leaves them to the schedulers.
        every = await conn.fetchval("SELECT count(*) FROM jobs")
        assert await migrate(db_url, now=today) == []
        assert await conn.fetchval("SELECT count(*) FROM jobs") == every

        async def no_more() -> bool:  # the maintenance Lease lost after the first batch
            return False

        first = await maintain_partitions(
            scheduler, today=today.date(), ahead_days=1, retention_days=30, batch=5, go_on=no_more
        )
        assert first.pruned == 5  # one batch; the rest waits for the next pass
        done = await maintain_partitions(
            scheduler, today=today.date(), ahead_days=1, retention_days=30, batch=5
        )

        assert first.pruned + done.pruned == len(ended) == 15  # batches of 5, then 5 and 5
        left = await conn.fetch("SELECT id FROM jobs")
        assert {r["id"] for r in left} == set(kept.values())
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM job_events WHERE job_id = ANY($1::uuid[])", ended
            )
            == 0
        )
        runs_left = await conn.fetch("SELECT job_id FROM executions")
        assert {r["job_id"] for r in runs_left} == {
            kept["with an execution left"],  # scheduled ahead, then cancelled: not past retention
            kept["ended yesterday"],
            kept["never run"],
        }
        promises = await conn.fetch("SELECT owner FROM worker_promises")
        assert [r["owner"] for r in promises] == ["worker-alive"]
        again = await maintain_partitions(
            scheduler, today=today.date(), ahead_days=1, retention_days=30, batch=5
        )
        assert again.pruned == 0
        # Only through the function: the scheduler's role cannot delete jobs itself.
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await scheduler.execute("DELETE FROM jobs")
    finally:
        await conn.close()
        await scheduler.close()

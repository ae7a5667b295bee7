"""A cron job fires each nominal time exactly once, whatever happened to the occurrence
before it: throttled by its tenant's limit, claimed before its dispatch was recorded, or
dispatched in one batch with a stale copy of its predecessor. (All found by the chaos
suite, tests/chaos.)"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from horae.models import JobSource, JobSpec
from horae.store import dispatch, executions, jobs, tenants
from tests.support import transitions

pytestmark = pytest.mark.one_group  # the store's functions on one group's database

NOW = datetime.now(UTC).replace(microsecond=0)
LEASE = timedelta(seconds=30)


async def first_attempts(pool: asyncpg.Pool, job_id: uuid.UUID) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT * FROM executions WHERE job_id = $1 AND attempt = 1 AND status <> 'cancelled' "
        "ORDER BY occurrence_at, due_at", job_id)  # fmt: skip


async def every_ten_seconds(conn: asyncpg.Connection) -> tuple[uuid.UUID, int, dispatch.Due]:
    """A cron job firing every 10 s in tenant acme: its id, its shard, its first occurrence."""
    job_id = await jobs.create_job(conn, JobSpec(task="t", cron="*/10 * * * * *"), tenant="acme",
                                   source=JobSource.API, shards=64, now=NOW)  # fmt: skip
    shard = job_id.int % 64
    [first] = await dispatch.preload(conn, [shard], NOW + timedelta(minutes=5), 100)
    return job_id, shard, first


async def test_a_throttled_occurrence_is_not_scheduled_again_by_a_repeated_dispatch(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        await tenants.set_tenant_limit(conn, "acme", 1)
        job_id, shard, first = await every_ten_seconds(conn)
        epoch = await dispatch.take_shard(conn, shard, "replica-a", NOW)
        await transitions.record_published(conn, shard, epoch, [first], NOW)  # schedules the next
        # (claimed once due: a limited tenant's execution is not claimed ahead)
        held = await transitions.claim(conn, first.id, first.due_at, owner="w1",
                                      now=first.due_at, lease=LEASE, tenant="acme")  # fmt: skip
        assert isinstance(held, executions.Claimed)
        nxt = (await first_attempts(pool, job_id))[1]
        throttled = await transitions.claim(conn, nxt["id"], nxt["due_at"], owner="w2",
                                           now=nxt["due_at"], lease=LEASE,
                                           tenant="acme")  # fmt: skip
        assert isinstance(throttled, executions.Throttled), "the tenant's one slot is taken"
        # The first occurrence is dispatched again (a republish after a failed record, or
        # after its own throttling): its next occurrence exists already, at another due_at.
        await transitions.record_published(conn, shard, epoch, [first], NOW)
    rows = await first_attempts(pool, job_id)
    occurrences = [r["occurrence_at"] for r in rows]
    assert len(occurrences) == len(set(occurrences)) == 2, [
        (str(r["occurrence_at"]), str(r["due_at"]), r["status"]) for r in rows
    ]


async def test_an_occurrence_claimed_before_its_dispatch_was_recorded_still_recurs(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        job_id, _, first = await every_ten_seconds(conn)
        # Published, then the scheduler's record failed (deadlock victim, crash): a worker
        # claims the still-`scheduled` row and finishes it; no scheduler will record it.
        claimed = await transitions.claim(conn, first.id, first.due_at, owner="w1", now=NOW,
                                         lease=LEASE, tenant="acme")  # fmt: skip
        assert isinstance(claimed, executions.Claimed)
    rows = await first_attempts(pool, job_id)
    assert len(rows) == 2, "the next occurrence was scheduled by the claim"
    assert rows[1]["occurrence_at"] == first.occurrence_at + timedelta(seconds=10)
    assert rows[1]["status"] == "scheduled"


async def test_a_batch_holding_an_occurrence_and_a_stale_copy_of_its_predecessor_recurs(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        job_id, shard, first = await every_ten_seconds(conn)
        epoch = await dispatch.take_shard(conn, shard, "replica-a", NOW)
        # Published, its record failed, then claimed by a worker (which schedules the next
        # occurrence); the dispatcher re-read it before the claim, so it holds it still.
        claimed = await transitions.claim(conn, first.id, first.due_at, owner="w1", now=NOW,
                                         lease=LEASE, tenant="acme")  # fmt: skip
        assert isinstance(claimed, executions.Claimed)
        second = next(d for d in await dispatch.preload(
            conn, [shard], NOW + timedelta(minutes=5), 100) if d.job_id == job_id)  # fmt: skip
        # One batch, in due order: the next occurrence, then the stale predecessor (its
        # due_at moved later by throttling, say).
        stale = replace(first, due_at=second.due_at + timedelta(seconds=1))
        await transitions.record_published(conn, shard, epoch, [second, stale], NOW)
    rows = await first_attempts(pool, job_id)
    assert [r["occurrence_at"] - first.occurrence_at for r in rows] == [
        timedelta(seconds=s) for s in (0, 10, 20)
    ], "the occurrence after the latest one dispatched is scheduled"

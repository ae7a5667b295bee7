"""Catch-up after a scheduler outage and after a pause, against the real store and broker
and a running dispatcher: exactly which occurrences run and which are recorded skipped, why.

The outage is simulated as it leaves the store: jobs created 5 minutes ago whose first
occurrence, due then, was never dispatched (no scheduler held their shard), and a job paused
2 minutes ago. Then a dispatcher takes the shard, as a scheduler coming back does."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from horae import broker
from horae.models import JobSource, JobSpec
from horae.scheduler.groups import take_shard
from horae.scheduler.listener import ShardListener
from horae.scheduler.rounds import decide
from horae.store import dispatch, jobs
from horae.store.executions import Claimed
from tests.integration.test_dispatcher import dispatcher
from tests.support import transitions
from tests.support.groups import job_in
from tests.support.wait import until

pytestmark = pytest.mark.one_group  # one group's dispatcher on its database

SHARD = 1
TEN = timedelta(seconds=10)


def floor10(t: datetime) -> datetime:
    return t.replace(second=t.second - t.second % 10, microsecond=0)


async def executions(pool: asyncpg.Pool, job_id: uuid.UUID) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT occurrence_at, status, error_kind, error_message FROM executions"
        " WHERE job_id = $1 ORDER BY occurrence_at",
        job_id,
    )


async def test_a_five_minute_outage_of_an_every_10s_job_runs_what_each_catch_up_says(
    pool: asyncpg.Pool, publisher: broker.Publisher, db_url: str
) -> None:
    now = datetime.now(UTC)
    specs = {
        "Skip": JobSpec(task="t", cron="*/10 * * * * *", catch_up="Skip"),
        "Latest": JobSpec(task="t", cron="*/10 * * * * *", catch_up="Latest"),
        "All": JobSpec(task="t", cron="*/10 * * * * *", catch_up="All"),
        # 65 s rather than 60: six occurrences whatever moment of its 10 s the dispatcher
        # looks at (the newest of the gap is 5 to 15 s old then).
        "All 65s": JobSpec(
            task="t", cron="*/10 * * * * *", catch_up="All", catch_up_window_seconds=65
        ),
        "paused, All 30s": JobSpec(
            task="t", cron="*/10 * * * * *", catch_up="All", catch_up_window_seconds=30
        ),
    }
    ids = {name: job_in(SHARD) for name in specs}
    async with pool.acquire() as conn:
        for name, spec in specs.items():
            await jobs.create_job(conn, spec, tenant="acme", source=JobSource.API, shards=64,
                                  now=now - timedelta(minutes=5), job_id=ids[name])  # fmt: skip
        paused = ids["paused, All 30s"]
        await jobs.pause_job(conn, paused, now=now - timedelta(minutes=2))
        await jobs.resume_job(conn, paused, now=now)
    first = floor10(now - timedelta(minutes=5)) + TEN  # each job's pending row, never run

    await scheduler_back(pool, publisher, db_url, list(ids.values()))
    done = datetime.now(UTC)

    rows = {name: await executions(pool, job_id) for name, job_id in ids.items()}
    # The gap's newest occurrence B: the dispatcher judged the gap once (every job's row was
    # due at the same moment, so in the same round), 5 s (the grace) after B at the earliest.
    skip_next = [r["occurrence_at"] for r in rows["Skip"] if r["status"] != "skipped"]
    newest = skip_next[0] - TEN
    assert floor10(now - timedelta(seconds=5)) <= newest <= floor10(done - timedelta(seconds=5))
    gap = [first + k * TEN for k in range(int((newest - first) / TEN) + 1)]
    assert len(gap) in (29, 30)  # 5 minutes of */10 s, less the 5 s grace

    def ran(name: str) -> list[datetime]:
        return [
            r["occurrence_at"]
            for r in rows[name]
            if r["status"] == "scheduled" and r["occurrence_at"] <= newest  # published
        ]

    def skipped(name: str) -> list[tuple[datetime, str, str]]:
        return [
            (r["occurrence_at"], r["error_kind"], r["error_message"])
            for r in rows[name]
            if r["status"] == "skipped"
        ]

    assert ran("Skip") == []
    assert skipped("Skip") == [
        (t, "catch_up", "catch-up policy Skip: a missed occurrence does not run") for t in gap
    ]
    assert ran("Latest") == [newest]
    assert skipped("Latest") == [
        (t, "catch_up", "catch-up policy Latest: only the latest missed occurrence runs")
        for t in gap[:-1]
    ]
    assert ran("All") == gap and skipped("All") == []
    assert ran("All 65s") == gap[-6:]
    assert [(t, kind) for t, kind, _ in skipped("All 65s")] == [(t, "catch_up") for t in gap[:-6]]
    assert all(
        m.startswith("outside the catch-up window of 1m5s (") for _, _, m in skipped("All 65s")
    )
    # After the gap, every job goes on as scheduled: nothing later is skipped.
    for name in specs:
        later = [r for r in rows[name] if r["occurrence_at"] > newest]
        assert later and all(r["status"] in ("queued", "scheduled") for r in later), name

    # Paused from now - 2 min and resumed at now with All and a 30 s window: the occurrences
    # due within 30 s of the resume run (from the resume on), the older ones of the pause are
    # recorded as paused.
    resumed_newest = floor10(now - timedelta(seconds=5))
    window_start = floor10(now - timedelta(seconds=30)) + TEN
    assert ran("paused, All 30s")[-1] >= resumed_newest
    assert [t for t in ran("paused, All 30s") if t <= resumed_newest] == [
        window_start + k * TEN for k in range(int((resumed_newest - window_start) / TEN) + 1)
    ]
    pause_start = floor10(now - timedelta(minutes=2)) + TEN
    assert [(t, kind) for t, kind, _ in skipped("paused, All 30s")] == [
        (pause_start + k * TEN, "paused") for k in range(int((window_start - pause_start) / TEN))
    ]


async def test_a_catch_up_skip_of_a_row_a_worker_claimed_first_keeps_the_chain_one_row(
    pool: asyncpg.Pool,
) -> None:
    # A round published the overdue row, and its record was lost (a crash): the row is
    # still `scheduled`. The next owner judges it a missed occurrence (Latest), but a worker
    # claims it first and schedules its successor. The skip does not apply, so the schedule
    # does not jump to the newest occurrence: the successor is the job's one pending row.
    now = datetime.now(UTC)
    spec = JobSpec(task="t", cron="*/10 * * * * *", catch_up="Latest")
    async with pool.acquire() as conn:
        job_id = await jobs.create_job(conn, spec, tenant="acme", source=JobSource.API,
                                       shards=64, now=now - timedelta(minutes=5),
                                       job_id=job_in(SHARD))  # fmt: skip
        epoch = await dispatch.take_shard(conn, SHARD, "b", now)
        [row] = await dispatch.preload(conn, [SHARD], now, 10)
        plan = await decide(conn, [row], now)
        skips = plan.skip
        assert plan.publish == [] and [s.kind for s in skips] == ["catch_up"]
        assert skips[0].gap is not None and skips[0].gap.runs  # Latest: the newest runs
        claimed = await transitions.claim(conn, row.id, row.due_at, owner="w", now=now,
                                          lease=timedelta(seconds=30), tenant="acme")  # fmt: skip
        assert isinstance(claimed, Claimed)
        await dispatch.record_dispatch(
            conn, {row.shard: dispatch.ShardDispatch(epoch, skipped=skips)}, now
        )
    rows = await executions(pool, job_id)
    assert [(r["occurrence_at"], r["status"]) for r in rows] == [
        (row.occurrence_at, "running"),
        (row.occurrence_at + TEN, "scheduled"),
    ]


async def scheduler_back(
    pool: asyncpg.Pool, publisher: broker.Publisher, db_url: str, job_ids: list[uuid.UUID]
) -> None:
    """The scheduler comes back: LISTEN on the shard (each replayed occurrence's successor is
    due already: its NOTIFY brings it in), take the shard and dispatch until each job's one
    pending row not published is its next occurrence, due no more than 5 s ago."""
    d = dispatcher(pool, publisher, lambda s: True)
    listening = asyncio.Event()

    def reconnected() -> None:
        d.reload()
        listening.set()

    listener = ShardListener(db_url, d.notified, reconnected)
    stop = asyncio.Event()
    loops = [asyncio.create_task(listener.run(stop))]
    await asyncio.wait_for(listening.wait(), timeout=10)
    await take_shard(d, listener, SHARD)
    loops += [asyncio.create_task(d.run_refresh(stop)), asyncio.create_task(d.run_dispatch(stop))]
    try:

        async def settled() -> bool:
            late = await pool.fetch(
                "SELECT id, due_at FROM executions WHERE job_id = ANY($1) AND status = 'scheduled'"
                " AND due_at < now() - interval '5 seconds'",
                job_ids,
            )
            published = d.published()  # (no worker claims them: they stay scheduled)
            return all((r["id"], r["due_at"]) in published for r in late)

        await until(settled, timeout=30, interval=0.2, what="the catch-up done")
    finally:
        stop.set()
        await asyncio.gather(*loops, return_exceptions=True)

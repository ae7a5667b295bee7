"""A job's history is read through indexes that name a status (migration 016 dropped the
`(job_id, due_at)` index every row version entered): each reader of one job's executions
returns what it did before and reads a few index entries per status, never the job's
whole history, whatever its length."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from horae.store.queries import Q
from tests.support.plans import Reads, nodes, reads

pytestmark = pytest.mark.one_group  # query plans of one database

JOB, OTHER = uuid.UUID(int=11), uuid.UUID(int=12)
ZERO = uuid.UUID(int=0)

HISTORY = """
INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,
                        job_version, status, finished_at, started_at)
SELECT gen_random_uuid(), $1, $5, 'x', 0, d, d, 1, 1, $3::execution_status,
       CASE WHEN $3 = 'scheduled' THEN NULL ELSE d END,
       CASE WHEN $3 = 'scheduled' THEN NULL ELSE d END
FROM generate_series(1, $2) AS i,
     LATERAL (SELECT $4::timestamptz - i * interval '1 minute') AS x(d)
"""

ONE = """
INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,
                        job_version, status, finished_at, started_at, lease_owner,
                        lease_until, manual)
SELECT gen_random_uuid(), $1, 'shop', 'x', 0, at, $3, $4, 1, s,
       CASE WHEN s IN ('scheduled', 'running') THEN NULL ELSE at END,
       CASE WHEN s IN ('scheduled', 'skipped') THEN NULL ELSE at END,
       CASE WHEN s = 'running' THEN 'w1' END,
       CASE WHEN s = 'running' THEN at + interval '1 minute' END, $6
FROM (SELECT $2::timestamptz, $5::execution_status) AS v(at, s)
"""


async def _history(pool: asyncpg.Pool) -> datetime:
    """JOB: a month of minutes succeeded, then a few rows of every other kind within the
    last minutes before `now` and one scheduled after it; OTHER (another namespace): a
    month of minutes too; another job of it, a backlog of 20,000 scheduled rows. Returns
    `now`."""
    # Noon of yesterday: today's partition, nearly empty just after midnight, is read
    # whole by any plan, and would be counted as a whole read.
    now = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0) - timedelta(days=1)
    await pool.execute(HISTORY, JOB, 30_000, "succeeded", now - timedelta(hours=1), "shop")
    await pool.execute(HISTORY, OTHER, 30_000, "succeeded", now, "acme")
    await pool.execute(HISTORY, uuid.UUID(int=13), 20_000, "scheduled", now, "acme")  # a backlog
    rows: list[tuple[int, int, str, bool]] = [  # (seconds before now, attempt, status, manual)
        (50, 1, "failed", False), (49, 2, "failed", False), (48, 3, "dead", False),
        (40, 1, "cancelled", False), (35, 1, "skipped", False), (30, 1, "timed_out", False),
        (25, 1, "succeeded", True), (20, 1, "cancelled", False), (10, 1, "running", False),
        (-30, 1, "scheduled", False),
    ]  # fmt: skip
    for ago, attempt, status, manual in rows:
        at = now - timedelta(seconds=ago)
        first = now - timedelta(seconds=50) if attempt > 1 else at  # retries of 50 s ago
        await pool.execute(ONE, JOB, at, first, attempt, status, manual)
    await pool.execute("ANALYZE executions")
    return now


async def _read(pool: asyncpg.Pool, sql: str, *args: object) -> tuple[list[Any], Reads, int]:
    """The statement's rows, what its plan reads (custom and generic plans alike), and how
    many rows of `executions` its run read and dropped (by filters, in either plan)."""
    removed = 0
    async with pool.acquire() as conn:
        for mode in ("force_custom_plan", "force_generic_plan"):
            async with conn.transaction():
                await conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
                raw = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, *args)
                every = nodes(raw if isinstance(raw, list) else json.loads(raw))
                dropped = [n.get("Rows Removed by Filter", 0) for n in every
                           if str(n.get("Relation Name")).startswith("executions")]  # fmt: skip
                removed = max(removed, sum(dropped))
                got = await conn.fetch(sql, *args)
        plan = await reads(conn, sql, *args)
    return got, plan, removed


def _newest(
    rows: list[asyncpg.Record], keep: Callable[[asyncpg.Record], bool], n: int
) -> list[Any]:
    kept = sorted((r for r in rows if keep(r)), key=lambda r: (r["due_at"], r["id"]), reverse=True)
    return [r["id"] for r in kept[:n]]


async def test_a_jobs_history_readers_return_its_newest_rows_reading_a_few_per_status(
    pool: asyncpg.Pool,
) -> None:
    now = await _history(pool)
    every = await pool.fetch("SELECT * FROM executions WHERE job_id = $1", JOB)
    ended = {"succeeded", "failed", "timed_out", "cancelled", "skipped", "dead"}

    got, plan, removed = await _read(pool, Q["job_executions"], JOB, None, None, 5)
    assert [r["id"] for r in got] == _newest(every, lambda r: True, 5)
    assert [r["status"] for r in got][:2] == ["scheduled", "running"]
    assert set(plan.indexes) == {"executions_job_status", "executions_job_live"}, plan.plan
    assert not plan.seq_scanned and removed == 0, (removed, plan.plan)

    cursor = (got[2]["due_at"], got[2]["id"])
    got, plan, removed = await _read(pool, Q["job_executions"], JOB, *cursor, 4)
    assert [r["id"] for r in got] == _newest(every, lambda r: (r["due_at"], r["id"]) < cursor, 4)
    assert not plan.seq_scanned and removed <= 1, (removed, plan.plan)

    got, plan, removed = await _read(pool, Q["recent_of_job"], JOB, 4)
    assert [r["id"] for r in got] == _newest(every, lambda r: r["status"] != "scheduled", 4)
    assert set(plan.indexes) == {"executions_job_status", "executions_job_live"}, plan.plan
    assert not plan.seq_scanned and removed == 0, (removed, plan.plan)

    got, plan, removed = await _read(pool, Q["recent_of_job_by_outcome"], JOB, 2, 3)
    assert sorted(r["id"] for r in got) == sorted(
        _newest(every, lambda r: r["status"] == "running", 9)
        + _newest(every, lambda r: r["status"] == "succeeded", 2)
        + _newest(every, lambda r: r["status"] in ended - {"succeeded"}, 3)
    )
    assert not plan.seq_scanned and removed == 0, (removed, plan.plan)

    # The newest dispatched scheduled occurrence: not the manual run, the scheduled one or
    # the skipped one after it, but the occurrence running since 10 s before now.
    got, plan, removed = await _read(pool, Q["job_run_times"], JOB)
    assert got[0]["last_schedule"] == now - timedelta(seconds=10)
    assert got[0]["last_success"] == now - timedelta(seconds=25)
    assert not plan.seq_scanned and removed <= 2, (removed, plan.plan)

    got, plan, removed = await _read(pool, Q["latest_attempt"], JOB, now - timedelta(seconds=50))
    assert [(r["attempt"], r["status"]) for r in got] == [(3, "dead")]
    assert set(plan.indexes) == {"executions_occurrence", "executions_occurrence_rest"}
    assert not plan.seq_scanned, plan.plan

    got, plan, removed = await _read(pool, Q["lock_job_executions"], JOB, "shop")
    assert len(got) == 2  # the running one and the scheduled one
    assert set(plan.indexes) == {"executions_job_status", "executions_job_live"}, plan.plan
    assert not plan.seq_scanned and removed == 0, (removed, plan.plan)


async def test_the_views_pages_of_named_jobs_read_a_few_rows_per_status(pool: asyncpg.Pool) -> None:
    now = await _history(pool)
    every = await pool.fetch("SELECT * FROM executions WHERE job_id = ANY($1)", [JOB, OTHER])

    def page(after: tuple[str, datetime, uuid.UUID], n: int) -> list[Any]:
        live = [r for r in every if r["status"] != "scheduled"
                and (r["tenant"], r["due_at"], r["id"]) > after]  # fmt: skip
        live.sort(key=lambda r: (r["tenant"], r["due_at"], r["id"]))
        return [r["id"] for r in live[:n]]

    start = ("", datetime.min.replace(tzinfo=UTC), ZERO)
    got, plan, removed = await _read(pool, Q["view_jobs_page"], [JOB, OTHER], *start, 5, None)
    assert [r["id"] for r in got] == page(start, 5)
    assert {r["tenant"] for r in got} == {"acme"}  # the namespace first in order
    assert not plan.seq_scanned and removed == 0, (removed, plan.plan)
    assert set(plan.indexes) <= {"executions_job_status", "executions_job_live"}, plan.plan

    # Past the other namespace's rows, and deep into this one's (a month in: its last
    # minutes), each status's probe starts at the cursor.
    after = ("shop", now - timedelta(seconds=45), ZERO)
    got, plan, removed = await _read(pool, Q["view_jobs_page"], [JOB, OTHER], *after, 10, None)
    assert [r["id"] for r in got] == page(after, 10)
    assert [r["status"] for r in got] == [
        "cancelled",
        "skipped",
        "timed_out",
        "succeeded",
        "cancelled",
        "running",
    ]
    assert not plan.seq_scanned and removed == 0, (removed, plan.plan)

    got, plan, removed = await _read(
        pool, Q["view_jobs_page"], [JOB, OTHER], *start, 5, ["failed", "dead"]
    )
    assert [r["status"] for r in got] == ["failed", "failed", "dead"]
    assert not plan.seq_scanned and removed == 0, (removed, plan.plan)

    got, plan, removed = await _read(
        pool,
        Q["view_jobs_ended_since"],
        "shop",
        [JOB],
        now - timedelta(seconds=45),
        now - timedelta(days=1),
    )
    assert sorted(r["status"] for r in got) == [
        "cancelled",
        "cancelled",
        "skipped",
        "succeeded",
        "timed_out",
    ]
    # (or the namespace's rows ended since, whichever the planner finds fewer)
    assert set(plan.indexes) <= {"executions_job_status", "executions_tenant_ended"}, plan.plan
    assert plan.indexes and not plan.seq_scanned, plan.plan

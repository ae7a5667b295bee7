"""The dispatcher's reads that came with published rows staying `scheduled` (migration 015):
an overlap policy's look at a job's live and published executions, and the reaper's look-up
of what was published, read indexes only, whatever the job's history."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from horae.store import dispatch
from horae.store.queries import Q
from tests.support.plans import nodes, reads

pytestmark = pytest.mark.one_group  # the plan of one database

JOB = uuid.UUID(int=7)

HISTORY = """
INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,
                        job_version, status, finished_at)
SELECT gen_random_uuid(), $3, 'shop', 'x', 7, d, d, 1, 1,
       CASE WHEN i % 1000 = 0 THEN 'scheduled' ELSE 'succeeded' END::execution_status,
       CASE WHEN i % 1000 = 0 THEN NULL ELSE d END
FROM generate_series(1, $1) AS i,
     LATERAL (SELECT $2::timestamptz - i * interval '1 second') AS x(d)
"""


@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
async def test_a_jobs_live_and_published_executions_are_read_through_indexes_only(
    pool: asyncpg.Pool, plan_cache_mode: str
) -> None:
    # A job with a day's history (40,000 ended rows, 40 still scheduled) and other jobs'.
    now = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0) - timedelta(days=1)
    await pool.execute(HISTORY, 40_000, now, JOB)
    await pool.execute(HISTORY, 40_000, now, uuid.UUID(int=8))
    await pool.execute("ANALYZE executions")
    keys = await pool.fetch(
        "SELECT id, due_at, shard FROM executions WHERE job_id = $1 LIMIT 50", JOB
    )
    async with pool.acquire() as conn:
        await conn.execute(f"SET plan_cache_mode = {plan_cache_mode}")
        live = await reads(conn, Q["live_executions_of_jobs"], [JOB], now)
        looked = await reads(conn, Q["still_scheduled"], [k["id"] for k in keys],
                             [k["due_at"] for k in keys], [k["shard"] for k in keys])  # fmt: skip
        await conn.execute("RESET plan_cache_mode")
    assert set(live.indexes) == {"executions_job_live", "executions_job_status"}, live.plan
    assert not live.seq_scanned, live.plan
    # Each key looked up on its own (the pending index would do as well as the primary
    # key), never every scheduled row read to be joined with them.
    assert set(looked.indexes) <= {"executions_pkey", "executions_pending"}, looked.plan
    assert looked.indexes and not looked.seq_scanned, looked.plan
    assert "Hash Join" not in str(looked.plan) and "Merge Join" not in str(looked.plan)


JOBS = """
INSERT INTO jobs (id, tenant, source, task, retry_policy, shard, run_at, cron, state)
SELECT gen_random_uuid(), 'shop', 'api', 'x', '{}', i % 64,
       CASE WHEN i % 100 <> 0 THEN $2::timestamptz END,
       CASE WHEN i % 100 = 0 THEN '* * * * *' END,
       CASE WHEN i % 200 = 0 THEN 'paused' ELSE 'active' END::job_state
FROM generate_series(1, $1) AS i
RETURNING id, cron IS NOT NULL AND state = 'active' AS recurs
"""


@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
async def test_a_rounds_look_for_recurring_jobs_reads_no_one_off(
    pool: asyncpg.Pool, plan_cache_mode: str
) -> None:
    # A round's first attempts are mostly one-offs' (here 300 of 10,000 jobs: every cron
    # job, half of them paused, and 200 one-offs): the look for the jobs whose next
    # occurrences it schedules reads only the active cron jobs' rows (migration 024), not a
    # row per first attempt.
    made = await pool.fetch(JOBS, 10_000, datetime.now(UTC) + timedelta(hours=1))
    await pool.execute("ANALYZE jobs")
    crons = {r["id"] for r in await pool.fetch("SELECT id FROM jobs WHERE cron IS NOT NULL")}
    ids = sorted([*crons, *[r["id"] for r in made if r["id"] not in crons][:200]])
    async with pool.acquire() as conn:
        await conn.execute(f"SET plan_cache_mode = {plan_cache_mode}")
        specs = await dispatch.recurring_specs(conn, ids)
        raw = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + Q["recurring_jobs"], ids)
        await conn.execute("RESET plan_cache_mode")
    assert sorted(specs) == sorted(r["id"] for r in made if r["recurs"])
    assert len(specs) == 50 and all(s.cron == "* * * * *" for s in specs.values())
    every = nodes(raw if isinstance(raw, list) else json.loads(raw))
    scans = [n for n in every if n.get("Relation Name") == "jobs"]
    assert [n.get("Index Name") for n in scans] == ["jobs_active_cron"], raw
    assert sum(n.get("Rows Removed by Filter", 0) for n in every) == 0, raw
    assert scans[0]["Actual Rows"] == 50, raw

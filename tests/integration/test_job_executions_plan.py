"""`GET /jobs/{id}/executions?status=` reads that status's rows, not the job's history."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from horae.models import ExecutionStatus
from horae.store import reads as store
from horae.store.queries import Q
from tests.support.plans import nodes, reads

pytestmark = pytest.mark.one_group  # query plans of one database

HISTORY = """
INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,
                        job_version, status, finished_at)
SELECT gen_random_uuid(), $1, 't', 'x', 0, d, d, 1, 1, $3::execution_status, d
FROM generate_series(1, $2) AS i,
     LATERAL (SELECT $4::timestamptz - i * interval '1 minute') AS x(d)
"""


@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
async def test_a_status_filter_reads_only_that_status_through_an_index(
    pool: asyncpg.Pool, plan_cache_mode: str
) -> None:
    # Noon of yesterday, whatever the hour: just after midnight today's partition held a
    # few rows, which the planner read whole (a seq scan) and the check counted.
    now = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0) - timedelta(days=1)
    job = uuid.uuid4()
    await pool.execute(HISTORY, job, 30_000, "succeeded", now)  # a month of minutes
    await pool.execute(HISTORY, job, 3, "failed", now - timedelta(seconds=30))
    await pool.execute("ANALYZE executions")
    args = (job, "failed", None, None, 100)
    async with pool.acquire() as conn:
        await conn.execute(f"SET plan_cache_mode = {plan_cache_mode}")
        rows = await store.for_job(conn, job, status=ExecutionStatus.FAILED, limit=100)
        raw = await conn.fetchval(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + Q["job_executions_of_status"], *args
        )
        for live in (ExecutionStatus.QUEUED, ExecutionStatus.RUNNING):  # executions_job_live
            assert await store.for_job(conn, job, status=live) == []
        await conn.execute("RESET plan_cache_mode")
    assert [r.status for r in rows] == ["failed"] * 3
    every = nodes(raw if isinstance(raw, list) else json.loads(raw))
    # The old query read the job's 30,003 rows through executions_job and dropped 30,000.
    removed = sum(n.get("Rows Removed by Filter", 0) for n in every)
    assert removed == 0, removed
    found = await reads(pool, Q["job_executions_of_status"], *args)
    assert set(found.indexes) == {"executions_job_status"}, found.plan
    assert not found.seq_scanned, found.plan

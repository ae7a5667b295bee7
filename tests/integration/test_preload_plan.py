"""The preload query reads through the partial index, whatever the history."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from horae.store.queries import Q

HISTORY = """
INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,
                        job_version, status, finished_at)
SELECT gen_random_uuid(), gen_random_uuid(), 't', 'x', (i % 64)::smallint, d, d, 1, 1,
       'succeeded', d
FROM generate_series(1, $1) AS i,
     LATERAL (SELECT $2::timestamptz - (i % 86400) * interval '1 second') AS x(d)
"""


def index_names(plan: Any) -> list[str]:
    found = []
    if isinstance(plan, dict):
        if "Index Name" in plan:
            found.append(plan["Index Name"])
        if plan.get("Node Type") == "Seq Scan" and str(plan.get("Relation Name", "")).startswith(
            "executions"
        ):
            found.append("SEQ SCAN " + plan["Relation Name"])
        for value in plan.values():
            found += index_names(value)
    elif isinstance(plan, list):
        for item in plan:
            found += index_names(item)
    return found


async def test_preload_uses_the_partial_pending_index(pool: asyncpg.Pool) -> None:
    now = datetime.now(UTC)
    await pool.execute(HISTORY, 50_000, now)
    await pool.execute(HISTORY, 20_000, now + timedelta(days=400))  # rows in the default partition
    await pool.execute(
        "INSERT INTO jobs (id, tenant, source, task, cron, retry_policy, shard) "
        "SELECT gen_random_uuid(), 't', 'api', 'x', '* * * * *', '{}', 0"
        " FROM generate_series(1, 10)"
    )
    await pool.execute(
        "INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,"
        " job_version) SELECT gen_random_uuid(), id, 't', 'x', 0, $1::timestamptz, $1::timestamptz,"
        " 1, 1 FROM jobs", now + timedelta(seconds=10),
    )  # fmt: skip
    await pool.execute("ANALYZE executions")
    await pool.execute("ANALYZE jobs")
    raw = await pool.fetchval(
        "EXPLAIN (FORMAT JSON) " + Q["preload_due"],
        list(range(64)), now + timedelta(seconds=60), datetime(1970, 1, 1, tzinfo=UTC),
        "00000000-0000-0000-0000-000000000000", 50_000,
    )  # fmt: skip
    names = index_names(raw if isinstance(raw, list) else json.loads(raw))
    execution_indexes = [n for n in names if n.startswith("executions") or n.startswith("SEQ")]
    assert execution_indexes, names
    # A partition the history does not reach (yesterday's, once the day is half over) is empty,
    # and reading an empty table costs nothing; any other sequential scan is a regression.
    scanned = [n.removeprefix("SEQ SCAN ") for n in execution_indexes if n.startswith("SEQ")]
    pages = {
        r["relname"]: r["relpages"]
        for r in await pool.fetch(
            "SELECT relname, relpages FROM pg_class WHERE relname = ANY($1::text[])", scanned
        )
    }
    assert not [n for n in scanned if pages[n] > 0], (names, pages)
    for name in [n for n in execution_indexes if not n.startswith("SEQ")]:
        parent = await pool.fetchval(
            "SELECT inhparent::regclass::text FROM pg_inherits WHERE inhrelid = $1::regclass", name
        )
        assert parent == "executions_pending", f"{name} is not the partial pending index"

"""A worker's writes to its own running executions (heartbeat, outcome, hand-back) find
them by primary key, whatever the history and however many other workers run. They are
functions (migration 004), so what they read is counted, not planned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from horae.store.queries import Q
from tests.integration.test_preload_plan import HISTORY
from tests.support.plans import reads_inside

pytestmark = pytest.mark.one_group  # query plans of one database

RUNNING = """
INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,
                        job_version, status, lease_owner, lease_until, started_at)
SELECT gen_random_uuid(), gen_random_uuid(), 't', 'x', (i % 64)::smallint, d, d, 1, 1,
       'running', 'w' || (i % 20), $2::timestamptz + interval '30 seconds', $2
FROM generate_series(1, $1) AS i,
     LATERAL (SELECT $2::timestamptz - (i % 3600) * interval '1 second') AS x(d)
"""


RUNNING_ONLY = {"executions_running", "executions_tenant_running"}
"""The partial indexes of `running` rows: their size is what runs now, whatever the history."""


async def test_heartbeat_outcome_and_hand_back_read_by_primary_key(pool: asyncpg.Pool) -> None:
    # Noon: a day of history lies evenly across yesterday's and today's partitions, and the
    # running hour in today's. Just after midnight today's would hold a few thousand rows,
    # which the planner rightly reads whole.
    now = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    await pool.execute(HISTORY, 50_000, now, 86_400)  # a whole day back from noon
    await pool.execute(RUNNING, 20_000, now)
    await pool.execute("ANALYZE executions")
    mine = await pool.fetch(
        "SELECT id, due_at FROM executions WHERE lease_owner = 'w3' ORDER BY id LIMIT 64"
    )
    ids, dues = [r["id"] for r in mine], [r["due_at"] for r in mine]
    n = len(mine)
    statements = {
        "heartbeat": (Q["heartbeat"], "w3", now, timedelta(seconds=30), ids),
        "release_running": (Q["release_running"], "w3", ids, now),
        "finish": (
            Q["finish"], ids, dues, ["succeeded"] * n, [None] * n, [None] * n, [None] * n,
            [None] * n, [None] * n, "w3", now, now, [now] * n,
        ),
    }  # fmt: skip
    for name, (sql, *args) in statements.items():
        found = await reads_inside(pool, sql, *args)
        assert not found.seq_scanned, (name, found.seq_scanned)
        # By primary key; on a partition with no running rows the planner may instead read
        # a partial index of running rows, which is empty there and never holds history.
        assert "executions_pkey" in found.indexes, (name, found.indexes)
        assert set(found.indexes) <= {"executions_pkey", *RUNNING_ONLY}, (name, found.indexes)

"""The preload query reads through the partial index, whatever the history."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from horae.store.queries import Q
from tests.support.plans import reads

pytestmark = pytest.mark.one_group  # query plans of one database

HISTORY = """
INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,
                        job_version, status, finished_at)
SELECT gen_random_uuid(), gen_random_uuid(), 't', 'x', (i % 64)::smallint, d, d, 1, 1,
       'succeeded', d
FROM generate_series(1, $1) AS i,
     LATERAL (SELECT $2::timestamptz - (i % $3) * interval '1 second') AS x(d)
"""


async def test_preload_uses_the_partial_pending_index(pool: asyncpg.Pool) -> None:
    now = datetime.now(UTC)
    # The history stays within today's partition: one reaching a few minutes into
    # yesterday's left that partition so small that its whole scan was the cheaper plan
    # (this test failed when run between about 13:00 and 13:53 UTC).
    today = int((now - now.replace(hour=0, minute=0, second=0, microsecond=0)).total_seconds())
    span = max(1, min(86_400, today))
    await pool.execute(HISTORY, 50_000, now, span)
    await pool.execute(HISTORY, 20_000, now + timedelta(days=400), 86_400)  # the default partition
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
    # the cursor's read, and a NOTIFY's re-read of the rows made since a millisecond
    for made_since in (None, uuid.UUID(int=(int(now.timestamp() * 1000) - 5_000) << 80)):
        found = await reads(
            pool, Q["preload_due"],
            list(range(64)), now + timedelta(seconds=60), datetime(1970, 1, 1, tzinfo=UTC),
            "00000000-0000-0000-0000-000000000000", 50_000, made_since,
        )  # fmt: skip
        # A partition the history does not reach is empty, and is read whole at no cost; a
        # scan of any other is a regression.
        assert found.indexes and not found.seq_scanned, found.plan
        assert set(found.indexes) == {"executions_pending"}, found.indexes

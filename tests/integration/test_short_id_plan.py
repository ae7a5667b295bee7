"""An execution named by its leading digits (`horae rerun 01a2b3c4d5e6`) is looked up in
the executions' primary key, a range of it, never by reading the history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from horae.cli.ids import ExecutionRef
from horae.store import reads as store
from horae.store.queries import Q
from tests.support.execution_ids import made_at
from tests.support.plans import reads

pytestmark = pytest.mark.one_group  # query plans of one database

HISTORY = """
INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,
                        job_version, status, finished_at)
SELECT u.id, gen_random_uuid(), 't', 'x', 0, u.due, u.due, 1, 1, 'succeeded', u.due
FROM unnest($1::uuid[], $2::timestamptz[]) AS u(id, due)
"""


async def test_leading_digits_read_a_range_of_the_primary_key(pool: asyncpg.Pool) -> None:
    # Noon of yesterday: a day of executions 3 s apart, made as they fell due.
    noon = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    dues = [noon - timedelta(days=1) + timedelta(seconds=3 * k) for k in range(28_800)]
    ids = [made_at(int(due.timestamp() * 1000)) for due in dues]
    await pool.execute(HISTORY, ids, dues)
    await pool.execute("ANALYZE executions")
    wanted = ids[12_345]
    ref = ExecutionRef.parse(wanted.hex[:12])
    async with pool.acquire() as conn:
        assert await store.execution_ids_in_range(conn, ref.low, ref.high, 6) == [wanted]
    found = await reads(pool, Q["execution_ids_in_range"], ref.low, ref.high, 6)
    assert set(found.indexes) == {"executions_pkey"}, found.plan
    assert not found.seq_scanned, found.plan

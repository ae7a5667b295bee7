"""The operator's scale-ahead read: pending executions due in a slice of time, per tenant
and bin, from every store group, through the pending rows' index only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from horae.models import JobSource, JobSpec
from horae.store import routing
from horae.store.due import BIN, DueCount
from horae.store.groups import Store
from horae.store.new_jobs import NewJob
from horae.store.queries import Q
from tests.support.plans import reads
from tests.support.store_rows import StoreRows

HISTORY = """
INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,
                        job_version, status, finished_at)
SELECT gen_random_uuid(), gen_random_uuid(), 'shop', 'x', i % 64, d, d, 1, 1, 'succeeded', d
FROM generate_series(1, $1) AS i,
     LATERAL (SELECT $2::timestamptz - i * interval '1 second') AS x(d)
"""


def _one_offs(tenant: str, at: datetime, count: int, task: str = "report") -> list[NewJob]:
    spec = JobSpec(task=task, run_at=at)
    return [NewJob(spec=spec, tenant=tenant, source=JobSource.API) for _ in range(count)]


async def test_executions_due_are_counted_per_tenant_and_bin_from_every_group(
    stored: StoreRows, db_url: str
) -> None:
    now = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=5)
    top = now.replace(second=0) + timedelta(minutes=1)  # a round minute, 60-119 s ahead
    created = now - timedelta(minutes=10)
    await stored.create(
        [
            *_one_offs("shop", top, 120),
            *_one_offs("shop", top + timedelta(seconds=7), 30),  # the same bin
            *_one_offs("shop", top + timedelta(seconds=10), 5),  # the next one
            *_one_offs("billing", top, 30),
            *_one_offs("billing", top, 10, task="published"),
            *_one_offs("shop", top + timedelta(minutes=5), 50),  # beyond the slice
            *_one_offs("shop", now - timedelta(seconds=1), 9),  # before it
        ],
        now=created,
    )
    # queued (published) rows are the queue's, not due ahead
    await stored.execute(
        "UPDATE executions SET status = 'queued', enqueued_at = $1 WHERE task = 'published'",
        created,
    )
    store = await Store.open(db_url, size=2)
    try:
        found = await routing.due_ahead(store, since=now, until=top + timedelta(minutes=1))
    finally:
        await store.close()
    summed: dict[tuple[str, datetime], DueCount] = {}
    for row in found:  # one bin from each group in the split run
        key = (row.tenant, row.first_due - (row.first_due - top) % BIN)
        had = summed.get(key)
        summed[key] = row if had is None else DueCount(
            row.tenant, min(had.first_due, row.first_due), max(had.last_due, row.last_due),
            had.count + row.count,
        )  # fmt: skip
    assert sorted(summed.values(), key=lambda r: (r.tenant, r.first_due)) == [
        DueCount("billing", top, top, 30),
        DueCount("shop", top, top + timedelta(seconds=7), 150),
        DueCount("shop", top + timedelta(seconds=10), top + timedelta(seconds=10), 5),
    ]


@pytest.mark.one_group  # the plan of one database
@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
async def test_the_due_read_takes_only_pending_rows_of_the_slice_through_their_index(
    pool: asyncpg.Pool, plan_cache_mode: str
) -> None:
    # Noon of yesterday: a day's history of ended rows beside a few pending ones.
    now = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0) - timedelta(days=1)
    await pool.execute(HISTORY, 40_000, now)
    await pool.execute("ANALYZE executions")
    args = (now, now + timedelta(seconds=65), list(range(64)), BIN)
    async with pool.acquire() as conn:
        await conn.execute(f"SET plan_cache_mode = {plan_cache_mode}")
        found = await reads(conn, Q["due_ahead"], *args)
        await conn.execute("RESET plan_cache_mode")
    assert set(found.indexes) == {"executions_pending"}, found.plan
    assert not found.seq_scanned, found.plan

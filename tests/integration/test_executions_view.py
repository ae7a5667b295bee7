"""The store reads behind `kubectl get executions` (horae/store/views.py): a namespace's
history paged in due order across store groups, live rows merged in, selections by job and
status, names, and what a watch reads; and the plan of a page deep in a long history."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
import pytest_asyncio

from horae.models import ExecutionStatus
from horae.store import views
from horae.store.groups import Store
from horae.store.queries import Q
from tests.support.groups import job_in
from tests.support.plans import reads

NOW = datetime.now(UTC).replace(microsecond=0)

JOB = """
INSERT INTO jobs (id, tenant, name, source, task, cron, retry_policy, shard, spec_version, state)
VALUES ($1, $2, $3, 'crd', 'e2e.echo', '* * * * *', '{}', $4, 1, 'active')
"""
RUN = """
INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at, attempt,
                        job_version, status, started_at, finished_at, lease_owner, lease_until)
VALUES ($1, $2, $3, 'e2e.echo', $4, $5::timestamptz, $5::timestamptz, 1, 1, $6::execution_status,
        CASE WHEN $6::text IN ('running', 'succeeded', 'failed') THEN $5::timestamptz END,
        CASE WHEN $6::text NOT IN ('scheduled', 'queued', 'running')
             THEN $5::timestamptz + interval '1 second' END,
        CASE WHEN $6::text = 'running' THEN 'w' END,
        CASE WHEN $6::text = 'running' THEN now() + interval '1 minute' END)
"""


@pytest_asyncio.fixture
async def store(role_urls: dict[str, str]) -> AsyncIterator[Store]:
    viewer = await Store.open(role_urls["viewer"], size=2)  # as the aggregated API reads
    yield viewer
    await viewer.close()


async def add_job(owner: Store, tenant: str, name: str, shard: int) -> uuid.UUID:
    job_id = job_in(shard, owner.catalog.shards)
    async with owner.for_shard(shard).acquire() as conn:
        await conn.execute(JOB, job_id, tenant, name, shard)
    return job_id


async def add_run(
    owner: Store, job_id: uuid.UUID, tenant: str, shard: int, due: datetime, status: str
) -> uuid.UUID:
    run_id = uuid.uuid4()
    async with owner.for_shard(shard).acquire() as conn:
        await conn.execute(RUN, run_id, job_id, tenant, shard, due, status)
    return run_id


async def test_a_namespaces_executions_page_in_due_order_across_groups_with_live_ones(
    db_url: str, store: Store
) -> None:
    owner = await Store.open(db_url, size=2)
    try:
        # Two jobs in shards of different groups (in the split run), a third namespace's.
        a = await add_job(owner, "shop", "a", 0)
        b = await add_job(owner, "shop", "b", 1)
        other = await add_job(owner, "bank", "a", 2)
        expected = []
        for i in range(10):
            job, shard = (a, 0) if i % 2 else (b, 1)
            status = "failed" if i % 3 == 0 else "succeeded"
            due = NOW - timedelta(minutes=30 - i)
            expected.append((await add_run(owner, job, "shop", shard, due, status), status))
        running = await add_run(
            owner, a, "shop", 0, NOW - timedelta(minutes=25, seconds=30), "running"
        )
        queued = await add_run(owner, b, "shop", 1, NOW - timedelta(seconds=1), "queued")
        await add_run(owner, b, "shop", 1, NOW + timedelta(minutes=1), "scheduled")  # not shown
        await add_run(owner, other, "bank", 2, NOW - timedelta(minutes=20), "succeeded")
    finally:
        await owner.close()

    everything = await views.page(store, "shop", jobs=None, statuses=None, after=None, limit=100)
    order = [r.id for r in everything.rows]
    assert not everything.more
    # Due order: the running one (due 25.5 minutes ago) between the 26th- and 25th-minute
    # rows, the queued one last; the scheduled one and the other namespace's nowhere.
    ended = [i for i, _ in expected]
    assert order == [*ended[:5], running, *ended[5:], queued]

    # Pages of 4 resume exactly where the last one stopped, whatever the groups.
    paged: list[uuid.UUID] = []
    after = None
    while True:
        page = await views.page(store, "shop", jobs=None, statuses=None, after=after, limit=4)
        paged += [r.id for r in page.rows]
        if not page.more:
            break
        last = page.rows[-1]
        after = (last.tenant, last.due_at, last.id)
    assert paged == order

    failed = await views.page(
        store, "shop", jobs=None, statuses={ExecutionStatus.FAILED}, after=None, limit=100
    )
    assert [r.id for r in failed.rows] == [i for i, s in expected if s == "failed"]
    live = await views.page(
        store, "shop", jobs=None, statuses={ExecutionStatus.RUNNING, ExecutionStatus.QUEUED},
        after=None, limit=100,
    )  # fmt: skip
    assert [r.id for r in live.rows] == [running, queued]
    only_a = await views.page(store, "shop", jobs=[a], statuses=None, after=None, limit=100)
    assert {r.job_id for r in only_a.rows} == {a} and len(only_a.rows) == 6
    assert await views.jobs_named(store, "shop", ["a"]) == [a]
    assert sorted(await views.jobs_named(store, None, ["a"])) == sorted([a, other])
    assert await views.job_names(store, [a, b]) == {a: "a", b: "b"}

    # Every namespace: namespace by namespace (bank before shop).
    every = await views.page(store, None, jobs=None, statuses=None, after=None, limit=100)
    assert [r.tenant for r in every.rows] == ["bank"] + ["shop"] * len(order)

    # An execution by the digits of its id its name holds.
    digits = running.hex[:16]
    low, high = uuid.UUID(digits + "0" * 16), uuid.UUID(digits + "f" * 16)
    assert [r.id for r in await views.by_id_range(store, "shop", low, high)] == [running]
    assert await views.by_id_range(store, "bank", low, high) == []

    # What a watch reads: the live ones, and those due lately that ended since a moment.
    assert {r.id for r in await views.live(store, "shop", None)} == {running, queued}
    since = await views.ended_since(
        store, "shop", None, due_from=NOW - timedelta(minutes=22),
        ended_after=NOW - timedelta(minutes=22),
    )  # fmt: skip
    assert {r.id for r in since} == set(ended[8:])
    assert [r.status for r in await views.by_ids(store, "shop", [running])] == ["running"]


@pytest.mark.one_group  # query plans of one database
@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
async def test_a_page_deep_in_a_long_history_reads_through_the_namespace_index(
    pool: asyncpg.Pool, plan_cache_mode: str
) -> None:
    noon = NOW.replace(hour=12, minute=0, second=0) - timedelta(days=1)
    job = uuid.uuid4()
    await pool.execute(
        "INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at,"
        " attempt, job_version, status, finished_at)"
        " SELECT gen_random_uuid(), $1, t, 'x', 0, d, d, 1, 1, 'succeeded', d"
        " FROM generate_series(1, 20000) AS i, LATERAL (SELECT $2::timestamptz"
        " - i * interval '1 minute', CASE WHEN i % 2 = 0 THEN 'shop' ELSE 'bank' END) AS x(d, t)",
        job, noon,
    )  # fmt: skip
    await pool.execute("ANALYZE executions")
    middle = noon - timedelta(days=7)
    args = ("shop", middle, uuid.UUID(int=0), 500, None)
    async with pool.acquire() as conn:
        await conn.execute(f"SET plan_cache_mode = {plan_cache_mode}")
        rows = await conn.fetch(Q["view_ended_page"], *args)
        await conn.execute("RESET plan_cache_mode")
    assert len(rows) == 500 and all(r["tenant"] == "shop" and r["due_at"] >= middle for r in rows)
    found = await reads(pool, Q["view_ended_page"], *args)
    assert set(found.indexes) == {"executions_tenant_ended"}, found.plan
    assert not found.seq_scanned, found.plan

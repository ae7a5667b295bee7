"""A worker's heartbeats keep only the executions it still works on: one whose outcome it
could not record (Postgres unreachable past the lease) is let go, so the reaper can
recover it. Before, the heartbeats kept it `running` for as long as the worker lived.
(Found by the chaos suite, tests/chaos.)"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from horae import broker
from horae.config import Settings
from horae.models import ExecutionMessage, JobSource, JobSpec
from horae.store import executions as store
from horae.store import jobs
from horae.store.groups import Store
from horae.worker.runtime import Worker
from horae.worker.sdk import TaskContext, TaskDefinition
from tests.support.wait import until

# The worker's store calls on one group's database (per group: test_worker_groups).
pytestmark = pytest.mark.one_group

TASK = "itest.blocks-until-told"


async def test_an_outcome_that_cannot_be_recorded_is_not_kept_alive_by_heartbeats(
    pool: asyncpg.Pool, db_url: str, broker_url: str, broker_prefix: str
) -> None:
    release = asyncio.Event()

    async def blocks(ctx: TaskContext, payload: dict[str, Any]) -> None:
        await release.wait()

    settings = Settings.from_env({"HORAE_DATABASE_URL": db_url, "HORAE_IDENTITY": "w-itest",
                                  "HORAE_EXECUTION_LEASE_SECONDS": "2",
                                  "HORAE_TENANTS": "t"})  # fmt: skip
    worker_store = await Store.open(db_url, size=2)
    connection = await broker.connect(broker_url)
    admin = await asyncpg.connect(db_url)
    stop = asyncio.Event()
    database = db_url.rsplit("/", 1)[1]
    try:
        publisher = broker.Publisher(connection, broker.Names(broker_prefix))
        await publisher.start()
        worker = Worker(
            settings=settings,
            store=worker_store,
            publisher=publisher,
            tasks={TASK: TaskDefinition(TASK, blocks)},
        )
        heartbeats = asyncio.create_task(worker.executions.heartbeat(stop))
        now = datetime.now(UTC)
        async with pool.acquire() as conn:
            job_id = await jobs.create_job(conn, JobSpec(task=TASK, run_at=now), tenant="t",
                                           source=JobSource.API, shards=64, now=now)  # fmt: skip
        row = await pool.fetchrow("SELECT * FROM executions WHERE job_id = $1", job_id)
        body = ExecutionMessage(
            execution_id=row["id"], job_id=job_id, task=TASK, tenant="t",
            due_at=row["due_at"], occurrence_at=row["occurrence_at"], attempt=1,
        )  # fmt: skip
        run = asyncio.create_task(worker.messages._execute(body, lambda: None))

        async def running() -> bool:
            return await admin.fetchval("SELECT status FROM executions WHERE id = $1",
                                        row["id"]) == "running"  # fmt: skip

        await until(running, timeout=10, what="the claim")
        # Postgres out of reach for the worker: no new connection, the open ones cut.
        await admin.execute(f'ALTER DATABASE "{database}" CONNECTION LIMIT 0')
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        release.set()  # the handler returns; its outcome cannot be written
        await asyncio.wait_for(run, timeout=15)  # the worker gives up after the lease
        await admin.execute(f'ALTER DATABASE "{database}" CONNECTION LIMIT -1')

        async def lapsed() -> bool:
            lease_until = await admin.fetchval(
                "SELECT lease_until FROM executions WHERE id = $1 AND status = 'running'",
                row["id"],
            )
            return lease_until is not None and lease_until < datetime.now(UTC)

        for _ in range(3):  # and stays lapsed over several heartbeat periods (2/3 s)
            await until(lapsed, timeout=5, interval=0.1, what="the lease to run out")
            await asyncio.sleep(0.7)
        assert await lapsed(), "a heartbeat extended the lease of an execution given up"
        heartbeats.cancel()
    finally:
        stop.set()
        await admin.execute(f'ALTER DATABASE "{database}" CONNECTION LIMIT -1')
        await admin.close()
        await connection.close()
        await worker_store.close()


async def running(pool: asyncpg.Pool, owner: str, count: int, now: datetime) -> list[Any]:
    """`count` executions of new one-off jobs, `running` for `owner` with leases ending `now`."""
    async with pool.acquire() as conn:
        ids = []
        for _ in range(count):
            job_id = await jobs.create_job(conn, JobSpec(task="t", run_at=now), tenant=owner,
                                           source=JobSource.API, shards=64, now=now)  # fmt: skip
            ids.append(await conn.fetchval("SELECT id FROM executions WHERE job_id = $1", job_id))
        await conn.execute(
            "UPDATE executions SET status = 'running', lease_owner = $2, lease_until = $3, "
            "started_at = $3 WHERE id = ANY($1::uuid[])", ids, owner, now,
        )  # fmt: skip
    return ids


async def test_a_heartbeat_never_waits_on_a_locked_row_and_extends_the_others(
    pool: asyncpg.Pool,
) -> None:
    # A row of the worker's is locked by a slow transaction (its own outcome's write,
    # queued behind a job row another writer holds; a reaper): the heartbeat must still
    # extend every other lease at once. Before, it waited for the lock, and every lease
    # of the worker ran out (the chaos suite's long run saw a 6 s stall).
    now = datetime.now(UTC)
    ids = await running(pool, "w-hb", 2, now)
    async with pool.acquire() as locker, locker.transaction():
        await locker.execute("SELECT 1 FROM executions WHERE id = $1 FOR UPDATE", ids[0])
        async with pool.acquire() as conn:
            await asyncio.wait_for(
                store.heartbeat(conn, owner="w-hb", now=now, lease=timedelta(seconds=30),
                                ids=ids),
                timeout=5,
            )  # fmt: skip
    leases = dict(await pool.fetch("SELECT id, lease_until FROM executions WHERE id = ANY($1)",
                                   ids))  # fmt: skip
    assert leases[ids[1]] == now + timedelta(seconds=30), "the unlocked row was extended"
    assert leases[ids[0]] == now, "the locked row is left for the next heartbeat"


async def test_the_heartbeat_loop_outlives_an_unexpected_error(
    pool: asyncpg.Pool, db_url: str, broker_url: str, broker_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # asyncpg raises InternalClientError ("cannot switch to state 15") on a connection cut
    # mid-operation; the loop used to catch only connection errors and died on it, so every
    # lease of the worker ran out (the chaos suite's 30-minute run, after pg_terminate).
    now = datetime.now(UTC)
    [execution_id] = await running(pool, "w-hb2", 1, now)
    real = store.heartbeat
    failures = [asyncpg.InternalClientError("cannot switch to state 15")]

    async def fails_once(*args: Any, **kwargs: Any) -> list[Any]:
        if failures:
            raise failures.pop()
        return await real(*args, **kwargs)

    monkeypatch.setattr(store, "heartbeat", fails_once)
    settings = Settings.from_env({"HORAE_DATABASE_URL": db_url, "HORAE_IDENTITY": "w-hb2",
                                  "HORAE_EXECUTION_LEASE_SECONDS": "1.5",
                                  "HORAE_TENANTS": "t"})  # fmt: skip
    connection = await broker.connect(broker_url)
    worker_store = await Store.open(db_url, size=2)
    stop = asyncio.Event()
    try:
        publisher = broker.Publisher(connection, broker.Names(broker_prefix))
        worker = Worker(settings=settings, store=worker_store, publisher=publisher, tasks={})
        shard = await pool.fetchval("SELECT shard FROM executions WHERE id = $1", execution_id)
        worker.executions._held[execution_id] = shard
        beats = asyncio.create_task(worker.executions.heartbeat(stop))

        async def extended() -> bool:
            lease = await pool.fetchval(
                "SELECT lease_until FROM executions WHERE id = $1", execution_id
            )
            return bool(lease > now)

        await until(extended, timeout=5, what="a heartbeat after the failed one")
        assert not failures and not beats.done()
    finally:
        stop.set()
        await connection.close()
        await worker_store.close()

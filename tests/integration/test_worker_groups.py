"""A worker over a store split in two groups (two PostgreSQL clusters): each execution is
claimed, run and recorded in the group of its job's shard, and one whose shard moved while
its message waited or its handler ran is followed to the shard's new group."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from horae import broker
from horae.config import Settings
from horae.models import ExecutionMessage, JobSource, JobSpec
from horae.probes import Probes
from horae.store import dispatch, jobs
from horae.store.db import connect
from horae.store.dispatch import Due
from horae.store.groups import MAIN, Store
from horae.store.moves import move_shards
from horae.worker.runtime import Worker
from horae.worker.sdk import TaskContext, TaskDefinition
from tests.support import transitions
from tests.support.groups import SECOND, job_in
from tests.support.queues import ready_messages
from tests.support.wait import until

TASK = "itest.groups"
IDENTITY = "w-groups"


@dataclass
class Served:
    worker: Worker
    queue: broker.Queue
    publisher: broker.Publisher
    stop: asyncio.Event


@asynccontextmanager
async def a_worker(
    db_url: str, broker_url: str, prefix: str, tasks: Mapping[str, TaskDefinition], lease: str
) -> AsyncIterator[Served]:
    """A worker of tenant `t` over the store at `db_url` (its catalog read now), bound to its
    pool's queue but not consuming yet."""
    settings = Settings.from_env({"HORAE_DATABASE_URL": db_url, "HORAE_IDENTITY": IDENTITY,
                                  "HORAE_EXECUTION_LEASE_SECONDS": lease, "HORAE_TENANTS": "t",
                                  "HORAE_POOL_NAMESPACE": "groups"})  # fmt: skip
    store = await Store.open(db_url, size=3)
    connection = await broker.connect(broker_url)
    stop = asyncio.Event()
    try:
        names = broker.Names(prefix)
        publisher = broker.Publisher(connection, names)
        await publisher.start()
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=10)
        queue = await broker.bind_pool(channel, names, namespace="groups", pool="default",
                                       tenants=["t"], tasks=list(tasks))  # fmt: skip
        worker = Worker(settings=settings, store=store, publisher=publisher, tasks=tasks)
        async with store.home.acquire() as conn:
            await worker.clock.sync(conn)
        yield Served(worker, queue, publisher, stop)
    finally:
        stop.set()
        await connection.close()
        await store.close()


async def consume_on_a_stale_catalog(served: Served) -> None:
    """Serve as `Worker.serve` does, but without following the catalog: a worker that missed
    the move's NOTIFY, whose writes find their rows gone and must look for them."""
    beats = asyncio.create_task(served.worker.executions.heartbeat(served.stop))
    try:
        await served.worker.messages.consume(served.queue, served.stop, Probes())
    finally:
        beats.cancel()


async def one_off(conn: asyncpg.Connection, shard: int, due_in: float = 0) -> ExecutionMessage:
    """A one-off job of `TASK` in `shard`, created in the group holding it (`conn`): the
    message the scheduler would publish for its execution."""
    now = datetime.now(UTC)
    spec = JobSpec(task=TASK, run_at=now + timedelta(seconds=due_in))
    job_id = await jobs.create_job(conn, spec, tenant="t", source=JobSource.API, shards=64,
                                   now=now, job_id=job_in(shard))  # fmt: skip
    row = await conn.fetchrow("SELECT * FROM executions WHERE job_id = $1", job_id)
    return ExecutionMessage(
        execution_id=row["id"], job_id=job_id, task=TASK, tenant="t", due_at=row["due_at"],
        occurrence_at=row["occurrence_at"], attempt=1,
    )  # fmt: skip


async def rows_of(conn: asyncpg.Connection, job_id: uuid.UUID) -> list[tuple[int, str]]:
    rows = await conn.fetch(
        "SELECT attempt, status::text FROM executions WHERE job_id = $1 ORDER BY attempt", job_id
    )
    return [(r["attempt"], r["status"]) for r in rows]


def recording(calls: list[uuid.UUID]) -> dict[str, TaskDefinition]:
    async def handler(ctx: TaskContext, payload: dict[str, Any]) -> None:
        calls.append(ctx.execution_id)

    return {TASK: TaskDefinition(TASK, handler)}


async def test_a_worker_runs_executions_of_both_groups_each_recorded_in_its_own(
    db_url: str, broker_url: str, broker_prefix: str, groups: dict[str, asyncpg.Connection]
) -> None:
    calls: list[uuid.UUID] = []
    placed = {2: MAIN, 3: SECOND, 10: MAIN, 11: SECOND}  # odd shards live in `second`
    async with a_worker(db_url, broker_url, broker_prefix, recording(calls), "30") as served:
        messages = [await one_off(groups[g], shard) for shard, g in placed.items()]
        serving = asyncio.create_task(served.worker.serve(served.queue, served.stop, Probes()))
        await served.publisher.publish_batch(messages)

        async def all_succeeded() -> bool:
            got = [
                await rows_of(groups[g], m.job_id)
                for m, g in zip(messages, placed.values(), strict=True)
            ]
            return all(rows == [(1, "succeeded")] for rows in got)

        await until(all_succeeded, timeout=20, what="every execution succeeded in its group")
        served.stop.set()
        await asyncio.wait_for(serving, timeout=10)
    assert sorted(calls) == sorted(m.execution_id for m in messages)
    for m, group in zip(messages, placed.values(), strict=True):
        other = SECOND if group == MAIN else MAIN
        assert await rows_of(groups[other], m.job_id) == [], "a row written in the other group"
        job = await groups[group].fetchrow("SELECT state, last_status FROM jobs WHERE id = $1",
                                           m.job_id)  # fmt: skip
        assert (job["state"], job["last_status"]) == ("completed", "succeeded")


async def test_a_shard_moved_between_dispatch_and_claim_runs_once_in_its_new_group(
    db_url: str, broker_url: str, broker_prefix: str, groups: dict[str, asyncpg.Connection]
) -> None:
    calls: list[uuid.UUID] = []
    async with a_worker(db_url, broker_url, broker_prefix, recording(calls), "30") as served:
        # Dispatched in `main`: the row published there (left scheduled), its message (twice:
        # a redelivery) in the queue. Then shard 2 moves to `second`, with the row; the
        # worker's catalog still places it in `main`.
        message = await one_off(groups[MAIN], 2)
        epoch = await dispatch.take_shard(groups[MAIN], 2, "scheduler-a", datetime.now(UTC))
        due = Due(message.execution_id, message.job_id, "t", TASK, 2, message.due_at,
                  message.occurrence_at, 1)  # fmt: skip
        assert await transitions.record_published(groups[MAIN], 2, epoch, [due], datetime.now(UTC))
        await served.publisher.publish_batch([message])
        await served.publisher.publish_batch([message])
        before = served.worker.store.catalog.version
        await move_shards(db_url, [2], SECOND)
        assert await rows_of(groups[SECOND], message.job_id) == [(1, "scheduled")]
        assert served.worker.store.catalog.group_of(2) == MAIN

        consuming = asyncio.create_task(consume_on_a_stale_catalog(served))

        async def succeeded() -> bool:
            return await rows_of(groups[SECOND], message.job_id) == [(1, "succeeded")]

        await until(succeeded, timeout=20, what="the execution succeeded in group second")

        async def both_delivered() -> bool:
            return await ready_messages(broker_url, served.queue.name) == 0

        await until(both_delivered, timeout=10, what="both messages delivered")
        served.stop.set()  # the worker finishes both, then stops
        await asyncio.wait_for(consuming, timeout=10)
    # Both acked: none came back to the queue when the worker's connection closed.
    assert await ready_messages(broker_url, served.queue.name) == 0
    assert calls == [message.execution_id], "run exactly once"
    assert served.worker.store.catalog.version > before
    assert await rows_of(groups[MAIN], message.job_id) == []
    job = await groups[SECOND].fetchrow("SELECT state, last_status FROM jobs WHERE id = $1",
                                        message.job_id)  # fmt: skip
    assert (job["state"], job["last_status"]) == ("completed", "succeeded")


async def moved_while_running(
    db_url: str,
    broker_url: str,
    broker_prefix: str,
    groups: dict[str, asyncpg.Connection],
    *,
    lease: str,
    heartbeat_first: bool,
) -> None:
    """Shard 4 moves to `second` while its execution's handler runs (the running row goes
    with its lease); then a heartbeat (`heartbeat_first`) or the outcome is the first write
    to find the row gone from `main`. Either finds it in `second`: the outcome is recorded
    there, never lost to a lease running out and a retry."""
    started, release = asyncio.Event(), asyncio.Event()
    calls: list[uuid.UUID] = []

    async def blocks(ctx: TaskContext, payload: dict[str, Any]) -> None:
        calls.append(ctx.execution_id)
        started.set()
        await release.wait()

    tasks = {TASK: TaskDefinition(TASK, blocks)}
    async with a_worker(db_url, broker_url, broker_prefix, tasks, lease) as served:
        message = await one_off(groups[MAIN], 4)
        consuming = asyncio.create_task(consume_on_a_stale_catalog(served))
        await served.publisher.publish_batch([message])
        await asyncio.wait_for(started.wait(), timeout=20)
        assert await rows_of(groups[MAIN], message.job_id) == [(1, "running")]

        await move_shards(db_url, [4], SECOND)
        copied = await groups[SECOND].fetchval(
            "SELECT lease_until FROM executions WHERE id = $1 AND lease_owner = $2",
            message.execution_id, IDENTITY,
        )  # fmt: skip
        assert copied is not None
        if heartbeat_first:

            async def extended_there() -> bool:
                lease_until = await groups[SECOND].fetchval(
                    "SELECT lease_until FROM executions WHERE id = $1", message.execution_id
                )
                return bool(lease_until > copied)

            await until(extended_there, timeout=10, what="a heartbeat in group second")
        else:  # the outcome's write is the first to miss the row
            assert served.worker.store.catalog.group_of(4) == MAIN
        release.set()

        async def succeeded() -> bool:
            return await rows_of(groups[SECOND], message.job_id) == [(1, "succeeded")]

        await until(succeeded, timeout=20, what="the outcome recorded in group second")
        served.stop.set()
        await asyncio.wait_for(consuming, timeout=10)
    assert calls == [message.execution_id]
    row = await groups[SECOND].fetchrow(
        "SELECT error_kind, lease_until FROM executions WHERE id = $1", message.execution_id
    )
    assert (row["error_kind"], row["lease_until"]) == (None, None)
    assert await rows_of(groups[MAIN], message.job_id) == [], "nothing left live in main"
    job = await groups[SECOND].fetchrow("SELECT state, last_status FROM jobs WHERE id = $1",
                                        message.job_id)  # fmt: skip
    assert (job["state"], job["last_status"]) == ("completed", "succeeded")


async def test_an_outcome_whose_shard_moved_while_its_handler_ran_is_recorded_in_the_new_group(
    db_url: str, broker_url: str, broker_prefix: str, groups: dict[str, asyncpg.Connection]
) -> None:
    # A 30 s lease: the next heartbeat is 10 s away, so the outcome meets the move first.
    await moved_while_running(
        db_url, broker_url, broker_prefix, groups, lease="30", heartbeat_first=False
    )


async def test_a_heartbeat_follows_a_running_execution_to_the_group_its_shard_moved_to(
    db_url: str, broker_url: str, broker_prefix: str, groups: dict[str, asyncpg.Connection]
) -> None:
    # A 3 s lease: a heartbeat every second, so one meets the move before the outcome.
    await moved_while_running(
        db_url, broker_url, broker_prefix, groups, lease="3", heartbeat_first=True
    )


async def test_a_claim_that_waited_for_a_moves_locks_finds_its_execution_in_the_new_group(
    db_url: str, broker_url: str, broker_prefix: str, groups: dict[str, asyncpg.Connection]
) -> None:
    # The move deletes the rows in `main` before its catalog commits: the claim, which waited
    # for the move's lock on its row, finds it gone and must read the catalog only once the
    # move has committed it, or it would drop its message as a duplicate.
    calls: list[uuid.UUID] = []
    async with a_worker(db_url, broker_url, broker_prefix, recording(calls), "30") as served:
        message = await one_off(groups[MAIN], 2)
        holder = await connect(db_url)
        try:
            held = holder.transaction()
            await held.start()
            await holder.execute(
                "SELECT 1 FROM executions WHERE id = $1 FOR UPDATE", message.execution_id
            )
            consuming = asyncio.create_task(consume_on_a_stale_catalog(served))

            async def waiting(count: int) -> bool:
                waiters = await groups[MAIN].fetchval(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
                return bool(waiters == count)

            # The move waits for the row first (for at most its lock timeout, 10 s), then
            # the claim, queued behind it.
            move = asyncio.create_task(move_shards(db_url, [2], SECOND))
            await until(lambda: waiting(1), timeout=5, interval=0.02, what="the move waiting")
            await served.publisher.publish_batch([message])
            await until(lambda: waiting(2), timeout=5, interval=0.02, what="the claim waiting")
            await held.commit()
            await asyncio.wait_for(move, timeout=20)
        finally:
            await holder.close()

        async def succeeded() -> bool:
            return await rows_of(groups[SECOND], message.job_id) == [(1, "succeeded")]

        await until(succeeded, timeout=20, what="the execution succeeded in group second")
        served.stop.set()
        await asyncio.wait_for(consuming, timeout=10)
    assert calls == [message.execution_id]
    assert await rows_of(groups[MAIN], message.job_id) == []

"""Garbage on a worker's queue: malformed, truncated, oversized, wrong-schema and
unstorable messages are dead-lettered with a reason, an unknown execution is dropped
(as a duplicate would be), and the worker stays alive and runs real executions after
them. Published straight to the pool's queue in a real RabbitMQ; a real `horae worker`."""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import aio_pika
import pytest

from horae import broker
from horae.models import ExecutionBatch, ExecutionMessage, JobSource, JobSpec
from tests.support.invocations import invocations
from tests.support.processes import Processes
from tests.support.store_rows import StoreRows
from tests.support.wait import until

TASKS = "tests/e2e/tasks.py"
CONCURRENCY = 2  # the prefetch: a message left unacked would soon starve the worker


def _batch(**overrides: object) -> dict[str, object]:
    now = datetime.now(UTC).isoformat()
    execution = {
        "execution_id": str(uuid.uuid4()), "job_id": str(uuid.uuid4()), "task": "e2e.echo",
        "tenant": "t", "due_at": now, "occurrence_at": now, "attempt": 1, **overrides,
    }  # fmt: skip
    return {"executions": [execution]}


VALID = json.dumps(_batch()).encode()
GARBAGE: dict[str, tuple[bytes, str]] = {
    # name: (body, the reason its dead letter carries)
    "not json": (b"{not json", "malformed"),
    "truncated": (VALID[: len(VALID) // 2], "malformed"),
    "not utf-8": (b"\xff\xfe\x00{", "malformed"),
    "empty": (b"", "malformed"),
    "a list": (b"[1, 2, 3]", "malformed"),
    "no executions": (b'{"executions": []}', "malformed"),
    "wrong field type": (json.dumps(_batch(execution_id="nope")).encode(), "malformed"),
    "unknown field": (json.dumps(_batch(colour="blue")).encode(), "malformed"),
    "attempt zero": (json.dumps(_batch(attempt=0)).encode(), "malformed"),
    "a bare dead letter": (
        json.dumps(_batch()["executions"][0]).encode(),  # type: ignore[index]
        "malformed",
    ),
    "NUL in the tenant": (json.dumps(_batch(tenant="a\u0000b")).encode(), "malformed"),
    "huge tenant": (json.dumps(_batch(tenant="t" * 100_000)).encode(), "malformed"),
    # Passes validation, but no database can hold it (past year 9999 in UTC): the claim
    # fails on it alone, and its neighbours in the claim's transaction still run.
    "due after year 9999": (
        json.dumps(_batch(due_at="9999-12-31T23:59:59-14:00")).encode(),
        "unprocessable",
    ),
    "oversized": (
        json.dumps({**_batch(), "padding": "x" * (broker.MAX_MESSAGE_BYTES + 1)}).encode(),
        "oversized",
    ),
}


@pytest.fixture
def worker_env(db_url: str, broker_url: str, broker_prefix: str) -> dict[str, str]:
    """A worker needs only the database and the broker (no control plane)."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("HORAE_")},
        "HORAE_DATABASE_URL": db_url, "HORAE_BROKER_URL": broker_url,
        "HORAE_BROKER_PREFIX": broker_prefix, "HORAE_CONCURRENCY": str(CONCURRENCY),
        "HORAE_LOG_LEVEL": "INFO", "HORAE_TENANTS": "t",  # the tenant of its messages
    }  # fmt: skip


@pytest.fixture
def workers(worker_env: dict[str, str], tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(worker_env, tmp_path)
    yield procs
    procs.stop_all()
    print(procs.dump())


async def _queue(channel: aio_pika.abc.AbstractChannel, name: str) -> aio_pika.abc.AbstractQueue:
    return await channel.declare_queue(name, passive=True)


async def test_garbage_is_dead_lettered_and_the_worker_keeps_running_executions(
    workers: Processes, stored: StoreRows, broker_url: str, broker_prefix: str, tmp_path: Path
) -> None:
    calls = tmp_path / "calls.jsonl"
    worker = workers.start("worker", "worker", "--tasks", TASKS, env={"HORAE_TEST_LOG": str(calls)})
    names = broker.Names(broker_prefix)
    connection = await aio_pika.connect(broker_url)
    try:
        channel = await connection.channel(publisher_confirms=True)

        async def consuming() -> bool:
            probe = await connection.channel()  # a passive declare of no queue closes it
            try:
                q = await probe.declare_queue(names.pool_queue("default", "default"), passive=True)
                return bool(q.declaration_result.consumer_count)
            except aio_pika.exceptions.ChannelClosed:
                return False
            finally:
                if not probe.is_closed:
                    await probe.close()

        await until(consuming, timeout=30, what="the worker consuming its queue")

        # An unknown execution (well formed: dropped like a duplicate), then the garbage,
        # several rounds so that anything left unacked would exhaust the prefetch.
        unknown = ExecutionBatch(executions=[ExecutionMessage.model_validate(
            _batch()["executions"][0])])  # type: ignore[index]  # fmt: skip
        for _ in range(2):
            await channel.default_exchange.publish(
                aio_pika.Message(unknown.model_dump_json().encode(), message_id="unknown"),
                routing_key=names.pool_queue("default", "default"),
            )
            for name, (body, _) in GARBAGE.items():
                await channel.default_exchange.publish(
                    aio_pika.Message(body, message_id=name),
                    routing_key=names.pool_queue("default", "default"),
                )

        # A real execution after the garbage still runs.
        now = datetime.now(UTC)
        job_id = await stored.create_job(
            JobSpec(task="e2e.echo", run_at=now), tenant="t", source=JobSource.API, now=now
        )
        row = await stored.fetchrow("SELECT * FROM executions WHERE job_id = $1", job_id)
        real = ExecutionMessage(
            execution_id=row["id"], job_id=job_id, task="e2e.echo", tenant="t",
            due_at=row["due_at"], occurrence_at=row["occurrence_at"], attempt=1,
        )  # fmt: skip
        await channel.default_exchange.publish(
            aio_pika.Message(ExecutionBatch(executions=[real]).model_dump_json().encode()),
            routing_key=names.pool_queue("default", "default"),
        )

        async def succeeded() -> bool:
            status = await stored.fetchval("SELECT status FROM executions WHERE id = $1", row["id"])
            return bool(status == "succeeded")

        await until(succeeded, timeout=30, what="the real execution to succeed")
        assert [c["execution_id"] for c in invocations(calls)] == [str(row["id"])]

        # Every piece of garbage was dead-lettered once per round, with its reason.
        expected = Counter({name: 2 for name in GARBAGE})

        async def dead_lettered() -> bool:
            dlq = await _queue(channel, names.dead_letter_queue)
            return (dlq.declaration_result.message_count or 0) >= sum(expected.values())

        await until(dead_lettered, timeout=30, what="the garbage in the dead-letter queue")
        letters: Counter[str] = Counter()
        dlq = await _queue(channel, names.dead_letter_queue)
        while (msg := await dlq.get(no_ack=True, fail=False)) is not None:
            letters[str(msg.message_id)] += 1
            assert msg.headers["reason"] == GARBAGE[str(msg.message_id)][1], msg.headers
            assert len(msg.body) <= 65536  # a dead letter keeps only the head of a huge body
        assert letters == expected
        assert worker.alive()
        # Nothing else was written: only the real job's execution exists.
        assert await stored.count("SELECT count(*) FROM executions") == 1
    finally:
        await connection.close()

    # Stopped, the worker gives back whatever it had not acked: nothing.
    assert worker.stop() == 0
    connection = await aio_pika.connect(broker_url)
    try:
        channel = await connection.channel()
        left = await _queue(channel, names.pool_queue("default", "default"))
        assert left.declaration_result.message_count == 0
    finally:
        await connection.close()

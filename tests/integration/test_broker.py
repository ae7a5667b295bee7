"""The broker's topology against a real RabbitMQ."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import aio_pika
import pytest

from horae import broker
from horae.models import ExecutionBatch, ExecutionMessage


async def test_every_name_in_names_declared_exists_once_a_publisher_started(
    publisher: broker.Publisher, broker_url: str, broker_prefix: str
) -> None:
    # The bench deletes a run's topology by this list; RabbitMQ deletes a missing queue
    # without complaint, so a wrong name would leave the real one behind unnoticed.
    exchanges, queues = broker.Names(broker_prefix).declared
    connection = await aio_pika.connect(broker_url)
    try:
        for exchange in exchanges:
            await (await connection.channel()).get_exchange(exchange, ensure=True)
        for queue in queues:
            await (await connection.channel()).get_queue(queue, ensure=True)
        with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
            await (await connection.channel()).get_queue(f"{broker_prefix}.pool.x", ensure=True)
    finally:
        await connection.close()


async def _executions_on(channel: aio_pika.abc.AbstractChannel, queue: str) -> list[str]:
    """(tenant, task) of every execution on `queue`, taking them off."""
    q = await channel.get_queue(queue, ensure=True)
    seen = []
    while (msg := await q.get(no_ack=True, fail=False)) is not None:
        seen += [
            f"{e.tenant}/{e.task}" for e in ExecutionBatch.model_validate_json(msg.body).executions
        ]
    return sorted(seen)


def _execution(tenant: str, task: str) -> ExecutionMessage:
    now = datetime.now(UTC)
    ids = {"execution_id": uuid.uuid4(), "job_id": uuid.uuid4()}
    return ExecutionMessage(
        **ids, task=task, tenant=tenant, due_at=now, occurrence_at=now, attempt=1
    )


async def test_each_tenants_executions_reach_only_the_pools_that_serve_that_tenant(
    publisher: broker.Publisher, broker_url: str, broker_prefix: str
) -> None:
    names = broker.Names(broker_prefix)
    connection = await aio_pika.connect(broker_url)
    try:
        channel = await connection.channel()
        # Two teams' pools of one name and one task; team-a also has a `default` pool;
        # a platform pool in Horae's namespace serves team-c's reports.
        for namespace, pool, tenants, tasks in [
            ("team-a", "reports", ["team-a"], ["reports.build"]),
            ("team-b", "reports", ["team-b"], ["reports.build"]),
            ("team-a", "default", ["team-a"], []),
            ("horae", "shared", ["team-c"], ["reports.build"]),
        ]:
            await broker.bind_pool(
                channel, names, namespace=namespace, pool=pool, tenants=tenants, tasks=tasks
            )
        tenants = ("team-a", "team-b", "team-c", "team-d")
        tasks = ("reports.build", "mail.send")
        await publisher.publish_batch([_execution(t, task) for t in tenants for task in tasks])
        assert await _executions_on(channel, names.pool_queue("team-a", "reports")) == [
            "team-a/reports.build"
        ]
        assert await _executions_on(channel, names.pool_queue("team-b", "reports")) == [
            "team-b/reports.build"
        ]
        assert await _executions_on(channel, names.pool_queue("horae", "shared")) == [
            "team-c/reports.build"
        ]
        # What no pool of its tenant serves goes to the tenant's own default pool...
        assert await _executions_on(channel, names.pool_queue("team-a", "default")) == [
            "team-a/mail.send"
        ]
        # ...or, for a tenant without one, waits in <prefix>.held: never to another's queue.
        held = ["team-b/mail.send", "team-c/mail.send", "team-d/mail.send", "team-d/reports.build"]
        assert await _executions_on(channel, names.held) == held
    finally:
        await connection.close()

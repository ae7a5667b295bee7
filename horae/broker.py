"""RabbitMQ through aio-pika: topology, a confirming publisher, a pool consumer.

Topology (names under the configured prefix, `horae` by default):

    <p>.dispatch   direct exchange, routing key = task name,
                   alternate exchange <p>.unrouted -> queue <p>.pool.default
    <p>.pool.NAME  durable quorum queue per WorkerPool, bound by task name
    <p>.dead       fanout exchange -> queue <p>.dead-letter

Messages are persistent. A dispatch message's body is an `ExecutionBatch`: up to
`BATCH_SIZE` executions of one task (the payload is read from Postgres at claim
time). A dead letter's body is one `ExecutionMessage`; its message id is the
execution id.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import aio_pika
from aio_pika.abc import (
    AbstractChannel,
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustConnection,
)

from horae.models import ExecutionBatch, ExecutionMessage

BATCH_SIZE = 100
"""Executions per dispatch message."""

MAX_MESSAGE_BYTES = 1024 * 1024
"""Largest dispatch message a worker reads: a full `ExecutionBatch` (1,000 executions) is
well under it. A bigger one is dead-lettered unread."""

DEAD_LETTER_BODY_BYTES = 65536
"""A dead letter keeps at most this much of a refused message's body."""


@dataclass(frozen=True)
class Names:
    prefix: str = "horae"

    @property
    def dispatch(self) -> str:
        return f"{self.prefix}.dispatch"

    @property
    def unrouted(self) -> str:
        return f"{self.prefix}.unrouted"

    @property
    def dead(self) -> str:
        return f"{self.prefix}.dead"

    @property
    def dead_letter_queue(self) -> str:
        return f"{self.prefix}.dead-letter"

    def pool_queue(self, pool: str) -> str:
        return f"{self.prefix}.pool.{pool}"

    @property
    def declared(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The (exchanges, queues) that `declare_topology` declares; each further pool
        declares its own queue."""
        return (self.dispatch, self.unrouted, self.dead), (
            self.pool_queue("default"), self.dead_letter_queue,
        )  # fmt: skip


async def connect(url: str) -> AbstractRobustConnection:
    """A connection that reconnects by itself (and restores its topology)."""
    return await aio_pika.connect_robust(url, timeout=15, client_properties={"product": "horae"})


async def declare_topology(channel: AbstractChannel, names: Names) -> AbstractExchange:
    """Declare exchanges, the default and dead-letter queues; return the dispatch exchange."""
    unrouted = await channel.declare_exchange(
        names.unrouted, aio_pika.ExchangeType.FANOUT, durable=True
    )
    dispatch = await channel.declare_exchange(
        names.dispatch,
        aio_pika.ExchangeType.DIRECT,
        durable=True,
        arguments={"alternate-exchange": names.unrouted},
    )
    default = await declare_pool_queue(channel, names, "default")
    await default.bind(unrouted)
    dead = await channel.declare_exchange(names.dead, aio_pika.ExchangeType.FANOUT, durable=True)
    dlq = await channel.declare_queue(
        names.dead_letter_queue, durable=True, arguments={"x-queue-type": "quorum"}
    )
    await dlq.bind(dead)
    return dispatch


async def declare_pool_queue(channel: AbstractChannel, names: Names, pool: str) -> AbstractQueue:
    return await channel.declare_queue(
        names.pool_queue(pool), durable=True, arguments={"x-queue-type": "quorum"}
    )


def _message(body: bytes, message_id: str) -> aio_pika.Message:
    return aio_pika.Message(
        body,
        message_id=message_id,
        content_type="application/json",
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
    )


class Publisher:
    """Publishes with publisher confirms: `publish_batch` returns once the broker has them all."""

    def __init__(self, connection: AbstractRobustConnection, names: Names) -> None:
        self._connection = connection
        self._names = names
        self._channel: AbstractChannel | None = None
        self._dispatch: AbstractExchange | None = None
        self._dead: AbstractExchange | None = None

    async def start(self) -> None:
        self._channel = await self._connection.channel(publisher_confirms=True)
        self._dispatch = await declare_topology(self._channel, self._names)
        self._dead = await self._channel.get_exchange(self._names.dead)

    async def publish_batch(self, messages: Sequence[ExecutionMessage]) -> None:
        """Publish all, grouped by task into `ExecutionBatch` messages (pipelined), and wait
        for every confirm; raises if any is refused."""
        assert self._dispatch is not None, "start() first"
        exchange = self._dispatch
        by_task: dict[str, list[ExecutionMessage]] = defaultdict(list)
        for m in messages:
            by_task[m.task].append(m)
        bodies = [
            (task, ExecutionBatch(executions=group[i : i + BATCH_SIZE]))
            for task, group in by_task.items()
            for i in range(0, len(group), BATCH_SIZE)
        ]
        await asyncio.gather(
            *(
                exchange.publish(
                    _message(batch.model_dump_json().encode(), str(uuid.uuid4())),
                    routing_key=task,
                    mandatory=False,
                )
                for task, batch in bodies
            )
        )

    async def dead_letter(self, body: bytes, message_id: str, headers: dict[str, Any]) -> None:
        assert self._dead is not None, "start() first"
        msg = _message(body, message_id)
        msg.headers = headers
        await self._dead.publish(msg, routing_key="")


async def bind_tasks(
    channel: AbstractChannel, names: Names, pool: str, tasks: Iterable[str]
) -> AbstractQueue:
    """Declare a pool's queue and bind it to the dispatch exchange for each task."""
    await declare_topology(channel, names)
    queue = await declare_pool_queue(channel, names, pool)
    for task in tasks:
        await queue.bind(names.dispatch, routing_key=task)
    return queue


IncomingMessage = AbstractIncomingMessage

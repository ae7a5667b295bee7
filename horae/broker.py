"""RabbitMQ through aio-pika: topology, a confirming publisher, a pool consumer.

Topology (names under the configured prefix, `horae` by default):

    <p>.dispatch      direct exchange, routing key = `routing_key(tenant, task)`,
                      alternate exchange <p>.unrouted
    <p>.pool.NS.NAME  durable quorum queue of the WorkerPool NAME of namespace NS, bound
                      for each (tenant it serves, task its workers register)
    <p>.unrouted      fanout exchange (what no pool serves) -> exchange <p>.fallback
    <p>.fallback      headers exchange on the `tenant` header: a pool named `default`
                      binds its queue for each tenant it serves; alternate exchange
                      <p>.held -> queue <p>.held (bounded: `HELD_MAX_MESSAGES`)
    <p>.dead          fanout exchange -> queue <p>.dead-letter
    <p>.control       direct exchange, routing key = `control_key(worker identity)`: each
                      worker binds an exclusive, auto-deleted queue of its own
                      (`declare_control_queue`) and is told there to stop running
                      handlers at once (`CancelRunning`; best-effort: a worker that is gone
                      has no queue, and the message is dropped)

So a tenant's executions reach only the pools that serve that tenant: those of its own
namespace, or a shared pool a cluster administrator set up in Horae's namespace. What
no pool of the tenant serves goes to the tenant's `default` pool, or else waits in
<p>.held (its rows stay `queued`; the reaper publishes them again, so a pool created
later gets them), never to another tenant's queue.

Messages are persistent. A dispatch message's body is an `ExecutionBatch`: up to
`BATCH_SIZE` executions of one tenant and one task (the payload is read from Postgres at
claim time); its `tenant` header names the tenant. A dead letter's body is one
`ExecutionMessage`; its message id is the execution id.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import aio_pika
import aio_pika.exceptions
from aio_pika.abc import (
    AbstractChannel,
    AbstractConnection,
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustConnection,
)

from horae.models import CancelRunning, ExecutionBatch, ExecutionMessage

BATCH_SIZE = 100
"""Executions per dispatch message."""

MAX_MESSAGE_BYTES = 1024 * 1024
"""Largest dispatch message a worker reads: a full `ExecutionBatch` (1,000 executions) is
well under it. A bigger one is dead-lettered unread."""

DEAD_LETTER_BODY_BYTES = 65536
"""A dead letter keeps at most this much of a refused message's body."""

HELD_MAX_MESSAGES = 10_000
"""<p>.held keeps at most this many messages (the oldest are dropped): its messages are
evidence, not the only copy, since their rows stay `queued` and are published again."""

ROUTING_KEY_BYTES = 255
"""AMQP's limit on a routing key."""

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
"""A DNS label, as every namespace name is: it has no dot and never starts with `#`."""


def routing_key(tenant: str, task: str) -> str:
    """The dispatch routing key of a tenant's task: `<tenant>.<task>` when the tenant is a
    DNS label (no dot, so the key names one pair) and the key fits in AMQP's 255 bytes;
    otherwise `#` and a SHA-256 of both (no label starts with `#`). One function, used by
    the publisher and every binding, so both always agree."""
    plain = f"{tenant}.{task}"
    if _LABEL.fullmatch(tenant) and len(plain.encode()) <= ROUTING_KEY_BYTES:
        return plain
    return "#" + hashlib.sha256(f"{tenant}\0{task}".encode()).hexdigest()


def control_key(identity: str) -> str:
    """The routing key of a worker's control queue: its identity (the lease owner its claims
    write), or `#` and a SHA-256 of it when it does not fit in 255 bytes. The publisher and
    the worker's binding both use it."""
    if len(identity.encode()) <= ROUTING_KEY_BYTES and not identity.startswith("#"):
        return identity
    return "#" + hashlib.sha256(identity.encode()).hexdigest()


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
    def fallback(self) -> str:
        return f"{self.prefix}.fallback"

    @property
    def held(self) -> str:
        """The exchange, and the queue, of messages no pool of their tenant takes."""
        return f"{self.prefix}.held"

    @property
    def dead(self) -> str:
        return f"{self.prefix}.dead"

    @property
    def dead_letter_queue(self) -> str:
        return f"{self.prefix}.dead-letter"

    @property
    def control(self) -> str:
        """The exchange of messages to one worker (by its identity)."""
        return f"{self.prefix}.control"

    def pool_queue(self, namespace: str, pool: str) -> str:
        """The queue of the WorkerPool `pool` of `namespace`."""
        return f"{self.prefix}.pool.{namespace}.{pool}"

    @property
    def declared(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The (exchanges, queues) that `declare_topology` declares; each pool declares
        its own queue."""
        exchanges = (
            self.dispatch,
            self.unrouted,
            self.fallback,
            self.held,
            self.dead,
            self.control,
        )
        return exchanges, (self.held, self.dead_letter_queue)


RECONNECT_SECONDS = 1
"""How long a lost connection waits before each attempt to connect again (aio-pika's
default is 5 s): the time a broker restart, or a worker cut off for missed heartbeats,
adds to every execution waiting on it. An attempt costs one TCP connect."""


async def connect(url: str, *, heartbeat: int | None = None) -> AbstractRobustConnection:
    """A connection that reconnects by itself, every `RECONNECT_SECONDS` until it can (and
    restores its topology). `heartbeat`: the AMQP heartbeat timeout to ask for, in seconds
    (None: the URL's, else the broker's)."""
    if heartbeat is not None:
        parts = urlsplit(url)
        query = [(k, v) for k, v in parse_qsl(parts.query) if k != "heartbeat"]
        url = urlunsplit(parts._replace(query=urlencode([*query, ("heartbeat", heartbeat)])))
    return await aio_pika.connect_robust(
        url,
        timeout=15,
        reconnect_interval=RECONNECT_SECONDS,
        client_properties={"product": "horae"},
    )


async def declare_topology(channel: AbstractChannel, names: Names) -> AbstractExchange:
    """Declare exchanges, the held and dead-letter queues; return the dispatch exchange."""
    unrouted = await channel.declare_exchange(
        names.unrouted, aio_pika.ExchangeType.FANOUT, durable=True
    )
    dispatch = await channel.declare_exchange(
        names.dispatch,
        aio_pika.ExchangeType.DIRECT,
        durable=True,
        arguments={"alternate-exchange": names.unrouted},
    )
    # <p>.dispatch and <p>.unrouted are declared as by earlier versions (a changed type or
    # argument would fail against an existing installation); the per-tenant fallback hangs
    # below them.
    held = await channel.declare_exchange(names.held, aio_pika.ExchangeType.FANOUT, durable=True)
    fallback = await channel.declare_exchange(
        names.fallback,
        aio_pika.ExchangeType.HEADERS,
        durable=True,
        arguments={"alternate-exchange": names.held},
    )
    await fallback.bind(unrouted)
    held_queue = await channel.declare_queue(
        names.held,
        durable=True,
        arguments={"x-queue-type": "quorum", "x-max-length": HELD_MAX_MESSAGES},
    )
    await held_queue.bind(held)
    dead = await channel.declare_exchange(names.dead, aio_pika.ExchangeType.FANOUT, durable=True)
    dlq = await channel.declare_queue(
        names.dead_letter_queue, durable=True, arguments={"x-queue-type": "quorum"}
    )
    await dlq.bind(dead)
    await channel.declare_exchange(names.control, aio_pika.ExchangeType.DIRECT, durable=True)
    return dispatch


async def declare_pool_queue(
    channel: AbstractChannel, names: Names, namespace: str, pool: str
) -> AbstractQueue:
    return await channel.declare_queue(
        names.pool_queue(namespace, pool), durable=True, arguments={"x-queue-type": "quorum"}
    )


def _message(body: bytes, message_id: str) -> aio_pika.Message:
    return aio_pika.Message(
        body,
        message_id=message_id,
        content_type="application/json",
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
    )


def _dispatch_message(batch: ExecutionBatch, tenant: str) -> aio_pika.Message:
    msg = _message(batch.model_dump_json().encode(), str(uuid.uuid4()))
    msg.headers = {"tenant": tenant}  # what <p>.fallback routes on
    return msg


class Publisher:
    """Publishes with publisher confirms: `publish_batch` returns once the broker has them all."""

    def __init__(self, connection: AbstractRobustConnection, names: Names) -> None:
        self._connection = connection
        self._names = names
        self._channel: AbstractChannel | None = None
        self._dispatch: AbstractExchange | None = None
        self._dead: AbstractExchange | None = None
        self._control: AbstractExchange | None = None

    async def start(self) -> None:
        self._channel = await self._connection.channel(publisher_confirms=True)
        self._dispatch = await declare_topology(self._channel, self._names)
        self._dead = await self._channel.get_exchange(self._names.dead)
        self._control = await self._channel.get_exchange(self._names.control)

    async def publish_batch(self, messages: Sequence[ExecutionMessage]) -> None:
        """Publish all, grouped by tenant and task into `ExecutionBatch` messages
        (pipelined), and wait for every confirm; raises if any is refused."""
        assert self._dispatch is not None, "start() first"
        exchange = self._dispatch
        by_kind: dict[tuple[str, str], list[ExecutionMessage]] = defaultdict(list)
        for m in messages:
            by_kind[m.tenant, m.task].append(m)
        bodies = [
            (tenant, task, ExecutionBatch(executions=group[i : i + BATCH_SIZE]))
            for (tenant, task), group in by_kind.items()
            for i in range(0, len(group), BATCH_SIZE)
        ]
        await asyncio.gather(
            *(
                exchange.publish(
                    _dispatch_message(batch, tenant),
                    routing_key=routing_key(tenant, task),
                    mandatory=False,
                )
                for tenant, task, batch in bodies
            )
        )

    async def cancel_running(self, identity: str, execution_ids: Sequence[uuid.UUID]) -> None:
        """Tell the worker `identity` to stop these executions' handlers now. Transient and
        unconfirmed by the worker: a worker that is gone has no control queue, and the
        message is dropped (the executions' `cancel_requested` marks stay the rule)."""
        assert self._control is not None, "start() first"
        body = CancelRunning(execution_ids=list(execution_ids)).model_dump_json().encode()
        msg = aio_pika.Message(
            body,
            message_id=str(uuid.uuid4()),
            content_type="application/json",
            delivery_mode=aio_pika.DeliveryMode.NOT_PERSISTENT,
        )
        await self._control.publish(msg, routing_key=control_key(identity), mandatory=False)

    async def dead_letter(self, body: bytes, message_id: str, headers: dict[str, Any]) -> None:
        assert self._dead is not None, "start() first"
        msg = _message(body, message_id)
        msg.headers = headers
        await self._dead.publish(msg, routing_key="")


async def bind_pool(
    channel: AbstractChannel,
    names: Names,
    *,
    namespace: str,
    pool: str,
    tenants: Iterable[str],
    tasks: Iterable[str],
) -> AbstractQueue:
    """Declare a pool's queue and bind it to the dispatch exchange for each tenant it serves
    and each task; a pool named `default` also takes what no pool of its tenants serves."""
    await declare_topology(channel, names)
    queue = await declare_pool_queue(channel, names, namespace, pool)
    tasks = sorted(tasks)
    for tenant in sorted(tenants):
        for task in tasks:
            await queue.bind(names.dispatch, routing_key=routing_key(tenant, task))
        if pool == "default":
            await queue.bind(names.fallback, arguments={"x-match": "all", "tenant": tenant})
    return queue


async def declare_control_queue(
    channel: AbstractChannel, names: Names, identity: str
) -> AbstractQueue:
    """The worker `identity`'s own control queue: exclusive to its connection and deleted
    with it (a new one, under a new name, after a restart), bound to <p>.control by
    `control_key(identity)`. Two workers sharing an identity both receive its messages; a
    worker stops only the handlers it runs."""
    await declare_topology(channel, names)
    queue = await channel.declare_queue(
        f"{names.control}.{uuid.uuid4().hex}", exclusive=True, auto_delete=True
    )
    await queue.bind(names.control, routing_key=control_key(identity))
    return queue


class QueueDepths:
    """Ready messages on queues, read with passive declares (which create nothing)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None

    async def ready(self, queue: str) -> int:
        """Messages ready for delivery on `queue`; 0 when it does not exist (yet)."""
        if self._connection is None or self._connection.is_closed:
            self._connection = await aio_pika.connect(self._url, timeout=15)
            self._channel = None
        if self._channel is None or self._channel.is_closed:
            self._channel = await self._connection.channel()
        try:
            declared = await self._channel.declare_queue(queue, passive=True)
        except aio_pika.exceptions.ChannelNotFoundEntity:
            self._channel = None  # the broker closes the channel of a failed passive declare
            return 0
        return int(declared.declaration_result.message_count or 0)

    async def close(self) -> None:
        if self._connection is not None:
            await self._connection.close()
            self._connection = None


IncomingMessage = AbstractIncomingMessage
Queue = AbstractQueue

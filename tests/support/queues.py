"""What a test reads of RabbitMQ itself, or puts there."""

from __future__ import annotations

import asyncio

import aio_pika

from horae import broker


async def ready_messages(broker_url: str, queue: str) -> int:
    """Messages waiting in `queue` (not delivered to a consumer)."""
    connection = await broker.connect(broker_url)
    try:
        channel = await connection.channel()
        declared = await channel.declare_queue(queue, passive=True)
        return int(declared.declaration_result.message_count or 0)
    finally:
        await connection.close()


async def backlog(broker_url: str, queue: str, count: int) -> None:
    """Put `count` messages on a pool's queue (no worker takes them)."""
    connection = await aio_pika.connect(broker_url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        await channel.declare_queue(queue, durable=True, arguments={"x-queue-type": "quorum"})
        await asyncio.gather(*(
            channel.default_exchange.publish(aio_pika.Message(b"{}"), routing_key=queue)
            for _ in range(count)
        ))  # fmt: skip
    finally:
        await connection.close()

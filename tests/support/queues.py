"""What a test reads of RabbitMQ itself."""

from __future__ import annotations

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

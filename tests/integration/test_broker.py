"""The broker's topology against a real RabbitMQ."""

from __future__ import annotations

import aio_pika
import pytest

from horae import broker


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

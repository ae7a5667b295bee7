from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from horae import broker


@pytest_asyncio.fixture
async def publisher(broker_url: str, broker_prefix: str) -> AsyncIterator[broker.Publisher]:
    """A publisher whose topology (exchanges, held and dead-letter queues) is declared."""
    connection = await broker.connect(broker_url)
    pub = broker.Publisher(connection, broker.Names(broker_prefix))
    await pub.start()
    yield pub
    await connection.close()

"""What the scheduler published to the held queue (`<prefix>.held`: no WorkerPool binds the
tests' tenants and tasks, so every message lands there), drained in publication order."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from horae import broker
from horae.models import ExecutionBatch, ExecutionMessage


async def drain_held(broker_url: str, prefix: str) -> list[ExecutionMessage]:
    """Every message waiting in the held queue, taken off it, in the order published."""
    connection = await broker.connect(broker_url)
    try:
        channel = await connection.channel()
        queue = await channel.get_queue(broker.Names(prefix).held)
        sent: list[ExecutionMessage] = []
        while (got := await queue.get(no_ack=True, fail=False)) is not None:
            sent += ExecutionBatch.model_validate_json(got.body).executions
        return sent
    finally:
        await connection.close()


class HeldWatch:
    """Consumes the held queue while open: every execution message that arrives, with when
    (`arrived`: execution id -> arrival times), so a test without workers sees what the
    scheduler published, how often and when."""

    def __init__(self, broker_url: str, prefix: str) -> None:
        self._url = broker_url
        self._prefix = prefix
        self._connection: broker.AbstractRobustConnection | None = None
        self.arrived: dict[uuid.UUID, list[datetime]] = {}

    async def __aenter__(self) -> HeldWatch:
        self._connection = await broker.connect(self._url)
        channel = await self._connection.channel()
        queue = await channel.get_queue(broker.Names(self._prefix).held)

        async def note(message: broker.IncomingMessage) -> None:
            at = datetime.now(UTC)
            for e in ExecutionBatch.model_validate_json(message.body).executions:
                self.arrived.setdefault(e.execution_id, []).append(at)
            await message.ack()

        await queue.consume(note)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._connection is not None:
            await self._connection.close()

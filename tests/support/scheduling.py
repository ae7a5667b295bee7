"""Helpers for scheduler tests: shard holders, executions falling due, messages on the queue."""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta

import aio_pika
import asyncpg
import pydantic

from horae.models import ExecutionBatch, ExecutionMessage, JobSource, JobSpec
from horae.store import jobs
from tests.support.kube import ControlPlane
from tests.support.store_rows import StoreRows


def holders(plane: ControlPlane, namespace: str) -> dict[str, set[int]]:
    """Who holds which shard Lease right now (holder '' = free)."""
    leases = plane.get_json("leases", "-n", namespace, "-l", "horae.dev/shard-lease")["items"]
    held: dict[str, set[int]] = defaultdict(set)
    for lease in leases:
        shard = int(lease["metadata"]["name"].rsplit("-", 1)[1])
        held[lease["spec"].get("holderIdentity") or ""].add(shard)
    return dict(held)


def lease_versions(plane: ControlPlane, namespace: str, label: str) -> dict[str, str]:
    """Each Lease with `label` and its resourceVersion (which moves at every write)."""
    leases = plane.get_json("leases", "-n", namespace, "-l", label)["items"]
    return {x["metadata"]["name"]: x["metadata"]["resourceVersion"] for x in leases}


async def falling_due(
    stored: StoreRows, count: int, *, start: timedelta, spread: timedelta, tenant: str = "t"
) -> list[uuid.UUID]:
    """Create `count` one-off jobs due evenly over [now + start, now + start + spread]."""
    now = datetime.now(UTC)
    new = [
        jobs.NewJob(
            spec=JobSpec(task="e2e.echo", run_at=now + start + spread * (i / max(count - 1, 1))),
            tenant=tenant, source=JobSource.API,
        )
        for i in range(count)
    ]  # fmt: skip
    return await stored.create(new, now=now)


class Published:
    """What the scheduler published to the held queue so far (no pool serves the tests'
    tenant `t`): each look drains the queue into `seen` (execution id -> messages)."""

    def __init__(self, broker_url: str, prefix: str) -> None:
        self._url = broker_url
        self._queue = f"{prefix}.held"
        self.seen: Counter[str] = Counter()

    async def every_execution(self, stored: StoreRows) -> bool:
        """Whether every execution in the store went out (the rows stay `scheduled`: no
        worker claims them). False while the broker or the database is unreachable."""
        try:
            self.seen += await drain(self._url, self._queue)
            ids = {str(r["id"]) for r in await stored.fetch("SELECT id FROM executions")}
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, aio_pika.AMQPException):
            return False
        return bool(ids) and ids <= set(self.seen)


async def messages(broker_url: str, queue: str) -> list[ExecutionMessage]:
    """Take every message off `queue`: the executions they carry, in the order published."""
    found: list[ExecutionMessage] = []
    connection = await aio_pika.connect(broker_url)
    try:
        channel = await connection.channel()
        q = await channel.declare_queue(queue, passive=True)
        while (msg := await q.get(no_ack=True, fail=False)) is not None:
            found += _executions(msg.body)
    finally:
        await connection.close()
    return found


async def drain(broker_url: str, queue: str) -> Counter[str]:
    """Take every message off `queue`; count the executions they carry, by execution id."""
    return Counter(str(m.execution_id) for m in await messages(broker_url, queue))


def _executions(body: bytes) -> list[ExecutionMessage]:
    try:
        return ExecutionBatch.model_validate_json(body).executions
    except pydantic.ValidationError:
        return [ExecutionMessage.model_validate_json(body)]


class HeldWatch:
    """Consumes the held queue (`<prefix>.held`: no WorkerPool serves the tests' tenants)
    while open: every execution that arrives, with when (`arrived`: execution id -> arrival
    times), so a test without workers sees what the scheduler published, how often, when."""

    def __init__(self, broker_url: str, prefix: str) -> None:
        self._url = broker_url
        self._queue = f"{prefix}.held"
        self._connection: aio_pika.abc.AbstractConnection | None = None
        self.arrived: dict[uuid.UUID, list[datetime]] = {}

    async def __aenter__(self) -> HeldWatch:
        self._connection = await aio_pika.connect(self._url)
        channel = await self._connection.channel()
        queue = await channel.declare_queue(self._queue, passive=True)

        async def note(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            at = datetime.now(UTC)
            for e in _executions(message.body):
                self.arrived.setdefault(e.execution_id, []).append(at)
            await message.ack()

        await queue.consume(note)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._connection is not None:
            await self._connection.close()

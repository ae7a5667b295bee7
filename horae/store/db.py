"""Connections to Postgres: the handles components hold (`Database`, a pool; `session`, one
connection; `Listener`, LISTEN on channels), and the asyncpg pool and connection beneath
them (`connect_pool`, `connect`: for the store itself, tests and benchmarks).

A component holds a `Database` and passes what `acquire` yields to the store's functions; it
never runs SQL on it. Driver errors leave every handle as `horae.errors.StoreError`s
(`boundary`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, TypeAlias

import asyncpg

from horae.errors import StoreUnavailable
from horae.store.boundary import translated, translating
from horae.store.queries import Q

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

    Conn: TypeAlias = asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]
    """A connection, or one borrowed from a pool."""


IDLE_IN_TRANSACTION_TIMEOUT_MS = 5_000
"""Postgres ends a session of ours left idle inside a transaction this long. Horae sends a
transaction's statements back to back, so such a session's client is dead, paused or cut
off; until it ends, its row locks stand, and a shard-epoch lock held by a cut-off scheduler
mid-dispatch held up that shard's takeover for as long as the cut lasted (24 s in a chaos
run, against a 4 s takeover)."""

WORKER_IDLE_IN_TRANSACTION_TIMEOUT_MS = 2_000
"""The same bound on a worker's connections. A worker's only transaction of more than one
statement is its claim of a batch (the claim, then the next occurrences of cron jobs it
claimed before the scheduler recorded their dispatch); one frozen (SIGSTOP, a stalled VM)
between the two held the batch's row locks for the 5 s above, and the other workers, given
its messages back by RabbitMQ about 2 s into the freeze (`HORAE_BROKER_HEARTBEAT_SECONDS`,
1), waited on those locks with their whole batches: executions due meanwhile started 5 s
late (`bench.horae_driver --scenario worker-faults`). A claim is two round trips apart,
milliseconds, and a tenth of a second on a worker loop loaded at 1,000/s."""


def server_settings(idle_in_transaction_ms: int) -> dict[str, str]:
    return {"idle_in_transaction_session_timeout": str(idle_in_transaction_ms)}


SERVER_SETTINGS = server_settings(IDLE_IN_TRANSACTION_TIMEOUT_MS)


async def _init_connection(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    for typ in ("json", "jsonb"):
        await conn.set_type_codec(typ, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def _release_as_is(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    """Pooled connections carry no session state: no SET, LISTEN, cursor or session-level
    advisory lock is ever taken on one (LISTEN lives on the single connections of
    `connect`; locks are transaction-scoped). So a release sends nothing, where asyncpg's
    default sends four statements (`RESET ALL`, `UNLISTEN *`, ...) every time; asyncpg
    still rolls back a transaction left open."""


async def connect_pool(
    dsn: str, *, size: int = 10, idle_in_transaction_ms: int = IDLE_IN_TRANSACTION_TIMEOUT_MS
) -> asyncpg.Pool[asyncpg.Record]:
    """A pool whose connections decode json/jsonb to Python objects, and are ended by
    Postgres when left idle in a transaction `idle_in_transaction_ms` (the driver's own: a
    component opens a `Database`)."""
    pool = await asyncpg.create_pool(
        dsn,
        min_size=1,
        max_size=size,
        init=_init_connection,
        reset=_release_as_is,
        command_timeout=60,
        server_settings=server_settings(idle_in_transaction_ms),
    )
    assert pool is not None
    return pool


async def connect(dsn: str) -> asyncpg.Connection[asyncpg.Record]:
    """A single connection (LISTEN, migrations) with the same codecs (the driver's own: a
    component opens a `session` or a `Listener`)."""
    conn: asyncpg.Connection[asyncpg.Record] = await asyncpg.connect(
        dsn, command_timeout=60, server_settings=SERVER_SETTINGS
    )
    await _init_connection(conn)
    return conn


class Database:
    """A pool of connections to Postgres: what components hold. `acquire` lends one for
    calls of the store's functions; its failures (none to be had, or lost on the way) leave
    as `StoreUnavailable`."""

    def __init__(self, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        self._pool = pool

    @classmethod
    @translated
    async def open(
        cls,
        dsn: str,
        *,
        size: int = 10,
        idle_in_transaction_ms: int = IDLE_IN_TRANSACTION_TIMEOUT_MS,
    ) -> Database:
        return cls(
            await connect_pool(dsn, size=size, idle_in_transaction_ms=idle_in_transaction_ms)
        )

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[Conn]:
        async with translating(), self._pool.acquire() as conn:
            yield conn

    def use(self) -> tuple[int, int, int]:
        """(connections open, of which idle, the most the pool opens)."""
        return self._pool.get_size(), self._pool.get_idle_size(), self._pool.get_max_size()

    @translated
    async def ping(self) -> None:
        """A round trip: raises unless the database answers."""
        await self._pool.fetchval(Q["ping"])

    @translated
    async def close(self) -> None:
        await self._pool.close()


@asynccontextmanager
async def session(dsn: str) -> AsyncIterator[Conn]:
    """One connection for the span of the block (a CLI command), then closed."""
    async with translating():
        conn = await connect(dsn)
        try:
            yield conn
        finally:
            await conn.close()


@translated
async def database_now(conn: Conn) -> datetime:
    """PostgreSQL's wall clock at this instant (not its transaction's start)."""
    now: datetime = await conn.fetchval(Q["database_now"])
    return now


Notify = Callable[[object, int, str, object], None]
"""Called with (the connection, the sender's pid, the channel, the payload) per NOTIFY."""


class OneConnection:
    """A handle on one connection of its own, for session state (LISTEN, a session lock):
    `open` again after it was lost (`closed`)."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn: asyncpg.Connection[asyncpg.Record] | None = None

    @translated
    async def open(self) -> None:
        self._conn = await connect(self._dsn)

    def closed(self) -> bool:
        return self._conn is None or self._conn.is_closed()

    def _open_conn(self) -> asyncpg.Connection[asyncpg.Record]:
        if self._conn is None:
            raise StoreUnavailable(f"the {type(self).__name__} connection is closed")
        return self._conn

    @translated
    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            await conn.close()


class Listener(OneConnection):
    """One connection that LISTENs on channels; notifications sent while it was lost are
    gone."""

    @translated
    async def listen(self, channel: str, notify: Notify) -> None:
        await self._open_conn().add_listener(channel, notify)

    @translated
    async def unlisten(self, channel: str, notify: Notify) -> None:
        await self._open_conn().remove_listener(channel, notify)

    @translated
    async def ping(self) -> None:
        """A round trip: notices a connection that died quietly."""
        await self._open_conn().execute(Q["ping"])

"""Connections to Postgres: an asyncpg pool with JSON codecs, and LISTEN helpers."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, TypeAlias

import asyncpg

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

SERVER_SETTINGS = {"idle_in_transaction_session_timeout": str(IDLE_IN_TRANSACTION_TIMEOUT_MS)}


async def _init_connection(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    for typ in ("json", "jsonb"):
        await conn.set_type_codec(typ, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def _release_as_is(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    """Pooled connections carry no session state: no SET, LISTEN, cursor or session-level
    advisory lock is ever taken on one (LISTEN lives on the single connections of
    `connect`; locks are transaction-scoped). So a release sends nothing, where asyncpg's
    default sends four statements (`RESET ALL`, `UNLISTEN *`, ...) every time; asyncpg
    still rolls back a transaction left open."""


async def connect_pool(dsn: str, *, size: int = 10) -> asyncpg.Pool[asyncpg.Record]:
    """A pool whose connections decode json/jsonb to Python objects."""
    pool = await asyncpg.create_pool(
        dsn, min_size=1, max_size=size, init=_init_connection, reset=_release_as_is,
        command_timeout=60, server_settings=SERVER_SETTINGS,
    )  # fmt: skip
    assert pool is not None
    return pool


async def connect(dsn: str) -> asyncpg.Connection[asyncpg.Record]:
    """A single connection (LISTEN, migrations) with the same codecs."""
    conn: asyncpg.Connection[asyncpg.Record] = await asyncpg.connect(
        dsn, command_timeout=60, server_settings=SERVER_SETTINGS
    )
    await _init_connection(conn)
    return conn

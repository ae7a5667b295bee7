"""Connections to Postgres: an asyncpg pool with JSON codecs, and LISTEN helpers."""

from __future__ import annotations

import json
from typing import Any

import asyncpg


async def _init_connection(conn: asyncpg.Connection) -> None:
    for typ in ("json", "jsonb"):
        await conn.set_type_codec(typ, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def connect_pool(dsn: str, *, size: int = 10) -> asyncpg.Pool:
    """A pool whose connections decode json/jsonb to Python objects."""
    pool = await asyncpg.create_pool(
        dsn, min_size=1, max_size=size, init=_init_connection, command_timeout=60
    )
    assert pool is not None
    return pool


async def connect(dsn: str) -> asyncpg.Connection:
    """A single connection (LISTEN, migrations) with the same codecs."""
    conn: asyncpg.Connection = await asyncpg.connect(dsn, command_timeout=60)
    await _init_connection(conn)
    return conn

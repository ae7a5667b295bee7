"""LISTEN on the owned shards' channels over one connection that survives database restarts.

After a reconnect the dispatcher is told to re-read its whole window, since
notifications sent while disconnected are gone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from horae.errors import StoreError
from horae.store.db import Listener

log = logging.getLogger(__name__)

Callback = Callable[[Any, int, str, object], None]
"""(the connection, the sender's pid, the channel, the payload): `store.db.Notify`."""


def channel(shard: int) -> str:
    return f"horae_shard_{shard}"


class ShardListener:
    def __init__(self, dsn: str, callback: Callback, on_reconnect: Callable[[], None]) -> None:
        self._dsn = dsn
        self._callback = callback
        self._on_reconnect = on_reconnect
        self._shards: set[int] = set()
        self._conn = Listener(dsn)
        self._lock = asyncio.Lock()  # one operation at a time on the connection

    async def add(self, shard: int) -> None:
        self._shards.add(shard)
        await self._apply(shard, listen=True)

    async def remove(self, shard: int) -> None:
        self._shards.discard(shard)
        await self._apply(shard, listen=False)

    async def _apply(self, shard: int, *, listen: bool) -> None:
        conn = self._conn
        if conn.closed():
            return  # the run loop re-listens everything on reconnect
        try:
            async with self._lock:
                if listen:
                    await conn.listen(channel(shard), self._callback)
                else:
                    await conn.unlisten(channel(shard), self._callback)
        except StoreError:
            log.warning("listener connection lost while (un)listening shard %d", shard)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                async with self._lock:
                    await self._conn.open()
                    for shard in sorted(self._shards):
                        await self._conn.listen(channel(shard), self._callback)
                self._on_reconnect()
                while not stop.is_set() and not self._conn.closed():
                    try:
                        await asyncio.wait_for(stop.wait(), timeout=1.0)
                    except TimeoutError:
                        async with self._lock:  # notice a dead connection
                            await self._conn.ping()
            except StoreError:
                log.warning("listener connection lost; reconnecting")
                await asyncio.sleep(0.5)
            finally:
                await self._conn.close()

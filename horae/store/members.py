"""Scheduler replicas' session locks: how the others learn at once that one's process died.

Each replica holds a session-level advisory lock named by its identity on a connection of
its own. Postgres lets go of it the moment that session ends, and a process that dies
(SIGKILL, a crash, OOM) has its sockets closed by its kernel, so its session ends within
milliseconds; the other replicas see the lock gone in `pg_locks`. A member Lease standing
still is then judged gone after a renew period rather than a lease duration
(`horae.scheduler.members`). A node lost without its sockets closing leaves the session
open until TCP gives up: then the lease duration decides, as before.
"""

from __future__ import annotations

from collections.abc import Iterable

import asyncpg

from horae.errors import StoreUnavailable
from horae.store.boundary import translated
from horae.store.db import connect
from horae.store.queries import Q

POLL_TIMEOUT = 2.0
"""Seconds a look at the locks may take before the connection is judged lost."""


class MemberLocks:
    """One connection that holds this replica's session lock and looks at the others'."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn: asyncpg.Connection[asyncpg.Record] | None = None

    @translated
    async def open(self) -> None:
        self._conn = await connect(self._dsn)

    def closed(self) -> bool:
        return self._conn is None or self._conn.is_closed()

    def _open_conn(self) -> asyncpg.Connection[asyncpg.Record]:
        if self._conn is None or self._conn.is_closed():
            raise StoreUnavailable("the member lock's connection is closed")
        return self._conn

    @translated
    async def take(self, identity: str) -> bool:
        """Take `identity`'s lock on this session; False while another session holds it
        (the previous process of a restarted replica, until its session ends)."""
        taken: bool = await self._open_conn().fetchval(
            Q["take_member_lock"], identity, timeout=POLL_TIMEOUT
        )
        return taken

    @translated
    async def held(self, identities: Iterable[str]) -> set[str]:
        """Those of `identities` whose lock some session holds now."""
        rows = await self._open_conn().fetch(
            Q["member_locks_held"], list(identities), timeout=POLL_TIMEOUT
        )
        return {r["identity"] for r in rows}

    @translated
    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            await conn.close()

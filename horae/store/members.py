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

from horae.store.boundary import translated
from horae.store.db import OneConnection
from horae.store.queries import Q

POLL_TIMEOUT = 2.0
"""Seconds a look at the locks may take before the connection is judged lost."""


class MemberLocks(OneConnection):
    """One connection that holds this replica's session lock and looks at the others'."""

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

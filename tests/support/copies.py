"""Each test's own databases, made one test ahead and dropped behind it.

Copying the migrated template (and, in the split run, its twin on the second cluster) took
about 0.2 s per test, and dropping them 0.13 s more: half a second of the ~560 integration
and e2e tests' set-up and teardown spent waiting on PostgreSQL, some three minutes of the
suite. So the next test's copy is made while a test runs, in the session's event loop, and a
finished test's databases are dropped there without the next test waiting for it. What a
test gets is the same: fresh copies no other test has touched.

A copy made ahead can fail (a test restarted the server under it): the test then waits for
one made at once, as before. Whatever was made and not taken, or failed to drop, is
dropped at the session's end (`close`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

from tests.support.groups import drop_database

log = logging.getLogger(__name__)

Database = tuple[str, str]
"""(administrator's URL of its cluster, database name)."""
Make = Callable[[list[Database]], Awaitable[None]]
"""Makes the databases it is given (each named afresh)."""


class Copies:
    def __init__(self) -> None:
        self._ahead: dict[str, tuple[list[Database], asyncio.Task[None]]] = {}
        self._dropping: set[asyncio.Task[None]] = set()
        self._left: set[Database] = set()  # made or being made, not yet dropped

    async def take(self, kind: str, clusters: list[str], make: Make) -> list[Database]:
        """Fresh databases of `kind`, one on each of `clusters` (their administrators'
        URLs), as `make` makes them; the next ones of this kind are begun before this
        returns."""
        made: list[Database] | None = None
        if kind in self._ahead:
            names, task = self._ahead.pop(kind)
            try:
                await task
                made = names
            except Exception as exc:  # e.g. the server restarted under it
                log.warning("a test database made ahead failed (%s): making one now", exc)
                self.drop(names)
        if made is None:
            made = self._named(clusters)
            await make(made)
        ahead = self._named(clusters)
        self._ahead[kind] = (ahead, asyncio.create_task(make(ahead)))
        return made

    def drop(self, databases: list[Database]) -> None:
        """Drop `databases` in the background."""
        task = asyncio.create_task(self._drop(databases))
        self._dropping.add(task)
        task.add_done_callback(self._dropping.discard)

    async def close(self) -> None:
        """Drop what is left: the copies made ahead, the drops that failed."""
        await asyncio.gather(*(task for _, task in self._ahead.values()), return_exceptions=True)
        self._ahead.clear()
        await asyncio.gather(*self._dropping, return_exceptions=True)
        await asyncio.gather(*(drop_database(*db) for db in sorted(self._left)),
                             return_exceptions=True)  # fmt: skip

    def _named(self, clusters: list[str]) -> list[Database]:
        made = [(admin, f"horae_{'g' if i else 't'}_{uuid.uuid4().hex[:10]}")
                for i, admin in enumerate(clusters)]  # fmt: skip
        self._left.update(made)
        return made

    async def _drop(self, databases: list[Database]) -> None:
        await asyncio.gather(*(self._drop_one(db) for db in databases))  # one per cluster

    async def _drop_one(self, db: Database) -> None:
        try:
            await drop_database(*db)
            self._left.discard(db)
        except Exception as exc:  # dropped again by `close`
            log.warning("dropping test database %s failed: %s", db[1], exc)

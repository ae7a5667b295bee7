"""A worker's promises: what it claimed ahead of the due time is its own to start.

A promise is one row per worker in each store group, rewritten in place (`store.promise`):
"everything I claimed ahead that was due by now (Postgres's clock as it wrote the row) may
have started". The worker writes one every `PROMISE_EVERY`, and at once (no closer than
`PROMISE_SPACING` to the last) when an execution it claimed ahead falls due: it starts that
handler only once a promise written at or after the due time has committed. The reaper
gives back to `scheduled` an execution claimed ahead whose due time its worker's promises
did not reach within `PROMISE_GRACE` (the worker was killed, or frozen, before it fell
due), so another worker runs it seconds after its due time, not once its lease (30 s by
default) has run out. Migration 019 says why the two never both run it.

So the handlers due at one instant share one write (per worker and group), and nothing is
written per execution. A promise never reaches past the instant it was written
(`PROMISE_AHEAD`): one written ahead would leave what a worker killed just before the due
time had claimed to the leases, since the store cannot tell whether it started.

Before starting a handler claimed ahead, the execution layer asks `covered`: a promise
reaching its due time, written within the grace of it. Otherwise (this worker stood still
past the grace, or could not reach the store) `confirm` promises again and reads whether the
claim is still its own; a claim given back meanwhile runs elsewhere and is not started here.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from horae import metrics
from horae.errors import HoraeError
from horae.store import executions as store
from horae.worker.routing import GroupCommits, Routes

log = logging.getLogger(__name__)

PROMISE_EVERY = 0.2
"""Seconds between a worker's promises (in each store group) when none is asked for: they
keep it among the live workers the reaper reads (`RETURN_WINDOW`)."""
PROMISE_SPACING = 0.02
"""Seconds at least between two promises in a group: the handlers claimed ahead that fall
due meanwhile wait for the next (at most this plus a round trip late)."""
PROMISE_AHEAD = timedelta(0)
"""How far ahead of the instant it is written a promise reaches: not at all. A worker
killed after promising ahead would leave what it claimed due within the reach to the
leases (the store cannot tell whether those started)."""
PROMISE_GRACE = timedelta(seconds=1.5)
"""How long after a due time its promise may come: the reaper gives an execution back
this long after its due time when no promise reached it."""
KEPT = 1024
"""Promises remembered per group (at least `PROMISE_SPACING` apart: 20 s or more)."""


def reached_in_time(
    written: Sequence[tuple[datetime, datetime]], due_at: datetime, grace: timedelta
) -> bool:
    """Whether one of the promises `written` ((alive_until, written_at), in the order
    written: both only grow) reached `due_at` and was written before `due_at + grace`. The
    first to reach it was written first, so it alone decides."""
    first = bisect.bisect_left(written, due_at, key=lambda p: p[0])
    return first < len(written) and written[first][1] < due_at + grace


class Promises:
    """The promises this worker has written, by store group."""

    def __init__(self, routes: Routes, owner: str) -> None:
        self._routes = routes
        self._owner = owner
        self._written: dict[str, list[tuple[datetime, datetime]]] = {}
        """By group, (alive_until, written_at) of the promises written, oldest first."""
        self._checks: GroupCommits[tuple[uuid.UUID, datetime], bool] = GroupCommits(self._check)
        self._waiting: dict[str, asyncio.Future[None]] = {}
        """By group: done at its next promise (`covered`)."""
        self._wake = asyncio.Event()
        """Set when an execution waits for a promise: the loop writes the next at once."""

    async def covered(self, group: str, due_at: datetime) -> str | None:
        """`covers`, waiting (at most the grace) for the next promise when none has reached
        `due_at` yet (it is written at once): how it was covered, as
        `horae_claims_ahead_checked_total` names it (`promised`: one already had; `waited`:
        the next did), or None when none did in time. The executions of a burst due at one
        instant share one promise, and none reads its row."""
        if self.covers(group, due_at):
            return "promised"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PROMISE_GRACE.total_seconds()
        while self._reach(group) < due_at and loop.time() < deadline:
            self._wake.set()
            await self._next(group)
        return "waited" if self.covers(group, due_at) else None

    def _reach(self, group: str) -> datetime:
        written = self._written.get(group)
        return written[-1][0] if written else datetime.min.replace(tzinfo=UTC)

    def _next(self, group: str) -> asyncio.Future[None]:
        """Done once the next promise in `group` is written or has failed."""
        future = self._waiting.get(group)
        if future is None or future.done():
            future = self._waiting[group] = asyncio.get_running_loop().create_future()
        return future

    def covers(self, group: str, due_at: datetime) -> bool:
        """Whether a promise written in `group` reached `due_at` within the grace of it: an
        execution due then, claimed ahead, cannot have been given back."""
        return reached_in_time(self._written.get(group, []), due_at, PROMISE_GRACE)

    async def confirm(self, shard: int, execution_id: uuid.UUID, due_at: datetime) -> bool:
        """Promise again in the group of `shard` and say whether this worker still holds the
        execution claimed ahead (id, due time): no longer given back if so."""
        return await self._routes.follow(
            shard, lambda group: self._checks.submit(group, (execution_id, due_at)), bool
        )

    async def _check(self, group: str, claims: Sequence[tuple[uuid.UUID, datetime]]) -> list[bool]:
        promise = await self._promise(group, claims)
        metrics.claims_ahead_checked.labels("read").inc(len(claims))
        return [c[0] in promise.mine for c in claims]

    async def _promise(
        self, group: str, claims: Sequence[tuple[uuid.UUID, datetime]] = ()
    ) -> store.Promise:
        try:
            async with self._routes.database(group).acquire() as conn:
                promise = await store.promise(
                    conn, owner=self._owner, ahead=PROMISE_AHEAD, grace=PROMISE_GRACE,
                    claims=claims,
                )  # fmt: skip
            written = self._written.setdefault(group, [])
            if not written or promise.alive_until > written[-1][0]:
                written.append((promise.alive_until, promise.written_at))
                del written[:-KEPT]
            return promise
        finally:
            waiting = self._waiting.pop(group, None)
            if waiting is not None and not waiting.done():
                waiting.set_result(None)

    async def start(self) -> None:
        """On starting up, before claiming anything: in each group, what this worker's
        identity still holds claimed ahead (a previous process of it, killed) goes back to
        `scheduled`, to run elsewhere now; then the first promise."""
        for group in self._routes.groups():
            try:
                async with self._routes.database(group).acquire() as conn:
                    forgot = await store.forget_claims_ahead(conn, self._owner)
                if forgot:
                    log.info("%d executions an earlier process of %s claimed ahead: scheduled "
                             "again", forgot, self._owner)  # fmt: skip
                await self._promise(group)
            except HoraeError:
                log.warning("store group %s: no promise yet", group, exc_info=True)

    async def run(self, stop: asyncio.Event) -> None:
        """Promise in every group every `PROMISE_EVERY`, and as soon as `PROMISE_SPACING`
        allows when a handler waits for one, until `stop` (one group out of reach does not
        hold the others' back)."""
        while not stop.is_set():
            groups = self._routes.groups()
            done = await asyncio.gather(*(self._promise(g) for g in groups), return_exceptions=True)
            for group, failed in zip(groups, done, strict=True):
                if isinstance(failed, HoraeError):
                    log.debug("store group %s: promise not written: %s", group, failed)
                elif isinstance(failed, BaseException):
                    raise failed
            await asyncio.sleep(PROMISE_SPACING)
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=PROMISE_EVERY - PROMISE_SPACING)
            except TimeoutError:
                pass
            self._wake.clear()

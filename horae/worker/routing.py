"""Which store group a worker writes an execution in, and where to write again after a move.

An execution's rows live in the group of its job's shard (`Store`, by the catalog the worker
holds): its claim, outcome, heartbeat and hand-back go there, group-committed per group
(`GroupCommits`), so no transaction spans two groups.

A write that finds no row in the group asked (a claim that answers nothing, an outcome not
recorded, a lease not extended) may have met a shard that just moved: the move locked the
rows, copied them to the new group and deleted them here. `Routes.moved` waits for a move in
progress to commit, reads the catalog again when it changed, and names the shards that are
now in another group: the write goes there once more. A duplicate or stale message finds its
shard where it was and is dropped, as in one group.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Generic, TypeVar

from horae.batching import GroupCommit
from horae.store import executions
from horae.store.db import Database
from horae.store.groups import Store

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")

MAX_HOPS = 3
"""How many times one write follows its shard to another group (each hop needs a change of
the catalog since the last: a shard moved back and forth while one write waits)."""


class Routes:
    """The worker's view of the store: the group of each shard, and where shards went."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._checks: GroupCommit[None, None] = GroupCommit(self._check)
        """Writes that found nothing at once share one look at the catalog (as claims share
        a transaction): a burst of duplicates costs one, not a connection each."""

    @property
    def home(self) -> Database:
        """The catalog's group, whose clock every worker reads."""
        return self._store.home

    def groups(self) -> list[str]:
        """Every store group, by name."""
        return self._store.groups()

    def group_of(self, shard: int) -> str:
        return self._store.catalog.group_of(shard)

    def shard_of_job(self, job_id: uuid.UUID) -> int:
        return self._store.shard_of(job_id)

    def database(self, group: str) -> Database:
        return self._store.database(group)

    async def moved(self, asked: str, shards: Iterable[int]) -> dict[int, str]:
        """Of `shards`, whose rows a write did not find in group `asked`: those now in
        another group, with that group (none: nothing moved, the write found what there is)."""
        await self._checks.submit(None)
        now = {s: self.group_of(s) for s in set(shards)}
        return {s: g for s, g in now.items() if g != asked}

    async def _check(self, waiters: Sequence[None]) -> list[None]:
        """Wait for a change of the catalog in progress, then read it again if it changed.
        Only a check that starts after a write's answer may serve it: `GroupCommit` runs
        those that arrive while one is in flight in the next."""
        async with self._store.home.acquire() as conn:
            await executions.await_catalog(conn)
        await self._store.moved()
        return [None] * len(waiters)

    def by_group(self, shards: Mapping[uuid.UUID, int]) -> dict[str, list[uuid.UUID]]:
        """Executions (id: shard) by the group of their shards."""
        split: dict[str, list[uuid.UUID]] = {}
        for execution_id, shard in shards.items():
            split.setdefault(self.group_of(shard), []).append(execution_id)
        return split

    async def moved_executions(
        self, asked: str, ids: Sequence[uuid.UUID], shards: Mapping[uuid.UUID, int]
    ) -> dict[str, list[uuid.UUID]]:
        """Of executions `ids` (shards: id: shard) a write did not find in group `asked`,
        those whose shards are now in another group, by that group."""
        moved = await self.moved(asked, (shards[i] for i in ids))
        split: dict[str, list[uuid.UUID]] = {}
        for execution_id in ids:
            there = moved.get(shards[execution_id])
            if there is not None:
                split.setdefault(there, []).append(execution_id)
        return split

    async def follow(
        self, shard: int, write: Callable[[str], Awaitable[R]], found: Callable[[R], bool]
    ) -> R:
        """`write` in the group of `shard`; when `found` says it found nothing there, again
        in the group the shard moved to, if it moved."""
        group = self.group_of(shard)
        answer = await write(group)
        for _ in range(MAX_HOPS):
            if found(answer):
                break
            there = (await self.moved(group, [shard])).get(shard)
            if there is None:
                break
            log.info("shard %d moved from group %s to %s: written there", shard, group, there)
            group = there
            answer = await write(group)
        return answer


class GroupCommits(Generic[T, R]):
    """A `GroupCommit` per store group: items written together share one group's
    transaction, never two groups'."""

    def __init__(self, flush: Callable[[str, Sequence[T]], Awaitable[Sequence[R]]]) -> None:
        self._flush = flush
        self._groups: dict[str, GroupCommit[T, R]] = {}

    async def submit(self, group: str, item: T) -> R:
        commit = self._groups.get(group)
        if commit is None:
            commit = self._groups[group] = GroupCommit(lambda items: self._flush(group, items))
        return await commit.submit(item)

"""The rows of a test's store, in whichever store group they are: what a test reads, or
sets up behind the components' backs. One group, or the two of the split run
(tests/conftest.py `split`). Tests reach the groups with their own pools and read the
catalog themselves: the routing under test is never what the test checks it with."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import asyncpg

from horae.models import JobSpec, shard_of
from horae.store import jobs
from horae.store.db import connect_pool
from horae.store.groups import MAIN
from horae.store.new_jobs import NewJob


class StoreRows:
    def __init__(self, urls: dict[str, str], pools: dict[str, asyncpg.Pool]) -> None:
        self.urls = urls
        """Each group's database (with the test's owner credentials), by group name."""
        self.pools = pools
        """Each group's pool, by group name (`main` holds the catalog)."""

    @classmethod
    async def open(cls, urls: dict[str, str], *, size: int = 3) -> StoreRows:
        return cls(urls, {g: await connect_pool(url, size=size) for g, url in sorted(urls.items())})

    async def close(self) -> None:
        for pool in self.pools.values():
            await pool.close()

    @property
    def main(self) -> asyncpg.Pool:
        return self.pools[MAIN]

    async def group_of(self, job_id: uuid.UUID) -> str:
        """The group the catalog places the job's shard in."""
        shards, placed = await self._placement()
        return placed.get(shard_of(job_id, shards), MAIN)

    async def job(self, job_id: uuid.UUID) -> asyncpg.Pool:
        """The pool of the job's group: where to create it, or change its rows."""
        return self.pools[await self.group_of(job_id)]

    @asynccontextmanager
    async def on_job(self, job_id: uuid.UUID) -> AsyncIterator[asyncpg.Connection]:
        """A connection to the job's group: for the store's functions on the job."""
        async with (await self.job(job_id)).acquire() as conn:
            yield conn

    async def create_job(self, spec: JobSpec, **kw: Any) -> uuid.UUID:
        """One job (`NewJob`'s keywords, and `now`) in the group of a new
        job id's shard; the id."""
        now = kw.pop("now")
        [job_id] = await self.create([NewJob(spec=spec, **kw)], now=now)
        return job_id

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        """The rows of every group, group after group (an ORDER BY orders within one)."""
        return [row for pool in self.pools.values() for row in await pool.fetch(sql, *args)]

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        """The first row of the one group that has one (an error when several have)."""
        found = [r for r in [await p.fetchrow(sql, *args) for p in self.pools.values()] if r]
        assert len(found) <= 1, f"rows in {len(found)} groups for {sql!r}: fetch them"
        return found[0] if found else None

    async def fetchval(self, sql: str, *args: Any) -> Any:
        """The value of the one group whose answer is not NULL (an error when several
        answer: a count is `count`)."""
        found = [
            v for v in [await p.fetchval(sql, *args) for p in self.pools.values()] if v is not None
        ]
        assert len(found) <= 1, f"answers {found} from several groups for {sql!r}"
        return found[0] if found else None

    async def count(self, sql: str, *args: Any) -> int:
        """A `SELECT count(*) ...` summed over the groups."""
        return sum([int(await p.fetchval(sql, *args)) for p in self.pools.values()])

    async def execute(self, sql: str, *args: Any) -> list[str]:
        """`sql` in every group (an UPDATE by id changes the rows of the one holding them)."""
        return [await p.execute(sql, *args) for p in self.pools.values()]

    async def create(self, new: Sequence[NewJob], *, now: datetime) -> list[uuid.UUID]:
        """Create `new` (the store's functions, in the group of each job's shard); their ids."""
        shards, placed = await self._placement()
        by_group: dict[str, list[NewJob]] = {}
        for job in new:
            by_group.setdefault(placed.get(shard_of(job.job_id, shards), MAIN), []).append(job)
        for group, part in by_group.items():
            async with self.pools[group].acquire() as conn:
                for i in range(0, len(part), 1000):
                    await jobs.create_jobs(conn, part[i : i + 1000], shards=shards, now=now)
        return [j.job_id for j in new]

    async def _placement(self) -> tuple[int, dict[int, str]]:
        """The installation's shard count, and the group of each shard the catalog places
        (a store never split places none: all are `main`'s)."""
        shards = await self.main.fetchval("SELECT shards FROM installation")
        placed = dict(await self.main.fetch("SELECT shard, group_name FROM shard_placement"))
        return int(shards), placed

"""Store groups: the virtual shards spread over several PostgreSQL primaries.

A job and all its executions live in the group of the job's shard (`models.shard_of`, from
the job's id). Which group holds which shard is data with a version, the catalog, kept in
the first group's database (`main`: the one `HORAE_DATABASE_URL` names); every component
reads it at start and follows it (NOTIFY `horae_catalog`, and a cheap version check when a
row seems to have gone). One group, the default, is an ordinary installation.

A component holds a `Store`: one `Database` (pool) per group, and the catalog to pick one.
`for_shard` and `for_job` route a call to the group of its rows; `each` lists every group
for the reads that fan out (a tenant's jobs, an execution found by id alone).
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from horae import metrics
from horae.errors import ConfigError
from horae.models import shard_of
from horae.store.boundary import translated
from horae.store.db import IDLE_IN_TRANSACTION_TIMEOUT_MS, Database, Listener
from horae.store.queries import Q

if TYPE_CHECKING:
    from horae.store.db import Conn

log = logging.getLogger(__name__)

MAIN = "main"
"""The first group: the catalog's own database."""
CHANNEL = "horae_catalog"
POLL_SECONDS = 10.0
"""How often a component that lost its LISTEN connection asks the catalog's version."""


@dataclass(frozen=True)
class Catalog:
    """Which group holds each shard, and where each group is."""

    version: int
    addresses: Mapping[str, str | None]
    """Each group's PostgreSQL URL without credentials (None: the catalog's own database)."""
    placement: tuple[str, ...]
    """The group of each shard, by shard number."""

    @property
    def shards(self) -> int:
        return len(self.placement)

    def group_of(self, shard: int) -> str:
        return self.placement[shard]

    def shards_of(self, group: str) -> list[int]:
        return [s for s, g in enumerate(self.placement) if g == group]

    def groups(self) -> list[str]:
        return sorted(self.addresses)


@translated
async def read_catalog(conn: Conn) -> Catalog:
    """The catalog as one snapshot; ConfigError when this database holds none (not the
    first group's, or `horae migrate` has not run)."""
    row = await conn.fetchrow(Q["read_catalog"])
    if row is None or not row["groups"] or not row["placement"]:
        raise ConfigError(
            "HORAE_DATABASE_URL: this database holds no Horae catalog: it must name the"
            " first store group's database, after `horae migrate`"
        )
    return Catalog(
        version=row["version"], addresses=row["groups"], placement=tuple(row["placement"])
    )


@translated
async def catalog_version(conn: Conn) -> int:
    return int(await conn.fetchval(Q["catalog_version"]))


def group_env(group: str) -> str:
    """The variable that may give a group's URL with credentials (a Secret's, in the chart)."""
    return f"HORAE_STORE_GROUP_{group.upper().replace('-', '_')}_URL"


def group_url(
    group: str, address: str | None, home_url: str, env: Mapping[str, str] = os.environ
) -> str:
    """How a component connects to `group`: `HORAE_STORE_GROUP_<NAME>_URL` when set; else the
    group's address with this component's own credentials (those of its HORAE_DATABASE_URL,
    the same role on every group: `horae migrate` creates the roles in each)."""
    if address is None:
        return home_url
    given = env.get(group_env(group))
    if given:
        return given
    home, there = urlsplit(home_url), urlsplit(address)
    credentials = home.netloc.rsplit("@", 1)[0] + "@" if "@" in home.netloc else ""
    host = there.netloc.rsplit("@", 1)[-1]
    query = there.query or home.query
    return urlunsplit(there._replace(netloc=credentials + host, query=query))


def address_of(url: str) -> str:
    """A URL without its credentials: what the catalog keeps of a group."""
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres") or not parts.hostname:
        raise ConfigError(f"store group URL {redact(url)!r}: not a postgresql:// URL with a host")
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]))


def redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.netloc.rsplit("@", 1)[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{parts.netloc.rsplit('@', 1)[-1]}"))


_watched: list[Store] = []


def _watch(store: Store) -> None:
    """The process's newest store reports its pools (`horae_store_connections`)."""
    if not _watched:
        metrics.watch_store_pools(lambda: [u for s in _watched for u in s.pool_use()])
    _watched[:] = [store]


class Store:
    """Every store group's pool, and the catalog that routes a call to one of them."""

    def __init__(
        self,
        home_url: str,
        home: Database,
        catalog: Catalog,
        *,
        size: int,
        env: Mapping[str, str],
        idle_in_transaction_ms: int = IDLE_IN_TRANSACTION_TIMEOUT_MS,
    ) -> None:
        self._home_url = home_url
        self._size = size
        self._idle_in_transaction_ms = idle_in_transaction_ms
        self._env = env
        self._databases: dict[str, Database] = {MAIN: home}
        self.catalog = catalog
        self._lock = asyncio.Lock()
        self._listener: Listener | None = None

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        size: int = 10,
        env: Mapping[str, str] = os.environ,
        idle_in_transaction_ms: int = IDLE_IN_TRANSACTION_TIMEOUT_MS,
    ) -> Store:
        """Every group's pool of `size` connections, ended by Postgres when left idle in a
        transaction `idle_in_transaction_ms` (horae.store.db)."""
        idle = idle_in_transaction_ms
        home = await Database.open(url, size=size, idle_in_transaction_ms=idle)
        try:
            async with home.acquire() as conn:
                catalog = await read_catalog(conn)
            store = cls(url, home, catalog, size=size, env=env, idle_in_transaction_ms=idle)
            await store._open_groups()
            _watch(store)
        except BaseException:
            await home.close()
            raise
        return store

    @property
    def home(self) -> Database:
        """The first group's database, which holds the catalog."""
        return self._databases[MAIN]

    def database(self, group: str) -> Database:
        return self._databases[group]

    def for_shard(self, shard: int) -> Database:
        return self._databases[self.catalog.group_of(shard)]

    def shard_of(self, job_id: uuid.UUID) -> int:
        return shard_of(job_id, self.catalog.shards)

    def for_job(self, job_id: uuid.UUID) -> Database:
        return self.for_shard(self.shard_of(job_id))

    def groups(self) -> list[str]:
        return self.catalog.groups()

    def each(self) -> list[tuple[str, Database]]:
        """Every group's database, in name order (`main` first among equals)."""
        return [(g, self._databases[g]) for g in self.catalog.groups()]

    def by_group(self, shards: Sequence[int]) -> dict[str, list[int]]:
        """`shards` by the group that holds them."""
        split: dict[str, list[int]] = {}
        for s in shards:
            split.setdefault(self.catalog.group_of(s), []).append(s)
        return split

    def pool_use(self) -> list[tuple[str, int, int, int]]:
        """(group, connections open, idle, maximum) of each group's pool."""
        return [(g, *db.use()) for g, db in sorted(self._databases.items())]

    async def _open_groups(self) -> None:
        for group, address in sorted(self.catalog.addresses.items()):
            if group not in self._databases:
                url = group_url(group, address, self._home_url, self._env)
                self._databases[group] = await Database.open(
                    url, size=self._size, idle_in_transaction_ms=self._idle_in_transaction_ms
                )

    async def refresh(self) -> bool:
        """Re-read the catalog (opening pools for groups added since); whether it changed."""
        async with self._lock:
            async with self.home.acquire() as conn:
                catalog = await read_catalog(conn)
            if catalog.version == self.catalog.version:
                return False
            self.catalog = catalog
            await self._open_groups()
            log.info("store catalog version %d: %s", catalog.version, self.describe())
            return True

    async def moved(self) -> bool:
        """Whether the catalog changed since it was read (then it is read again): a row this
        component expected may have moved to another group."""
        async with self.home.acquire() as conn:
            version = await catalog_version(conn)
        return version != self.catalog.version and await self.refresh()

    def describe(self) -> str:
        return ", ".join(f"{g}: {len(self.catalog.shards_of(g))} shards" for g in self.groups())

    async def follow(self, stop: asyncio.Event) -> None:
        """Until `stop`: re-read the catalog whenever it changes (NOTIFY horae_catalog, or
        every `POLL_SECONDS` as the safety net)."""
        changed = asyncio.Event()
        listener = Listener(self._home_url)
        try:
            while not stop.is_set():
                await self._follow_once(listener, changed)
                try:  # (asyncio.timeout: no task of its own, unlike wait_for)
                    async with asyncio.timeout(POLL_SECONDS):
                        await changed.wait()
                except TimeoutError:
                    changed.set()
        finally:
            await listener.close()

    async def _follow_once(self, listener: Listener, changed: asyncio.Event) -> None:
        try:
            if listener.closed():
                await listener.open()
                await listener.listen(CHANNEL, lambda *_: changed.set())
                changed.set()  # missed while not listening
            if changed.is_set():
                changed.clear()
                await self.refresh()
            else:
                await listener.ping()
        except Exception:  # the loop must outlive any one failure
            log.warning("cannot follow the store catalog; retrying", exc_info=True)

    async def close(self) -> None:
        for database in self._databases.values():
            await database.close()

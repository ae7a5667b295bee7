"""Schema migrations: numbered, forward-only SQL files applied under an advisory lock.

`horae migrate` applies what is missing (several at once are safe: they queue
on the lock and find nothing left to do), records or checks the installation's
settings (shards, retention: `horae.store.installation`), then creates the daily
execution partitions ahead and drops those past the installation's retention.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from importlib import resources
from typing import TYPE_CHECKING

import asyncpg

from horae.store.boundary import translated
from horae.store.installation import Installation, history_kept_from, settle_installation
from horae.store.queries import Q

if TYPE_CHECKING:
    from horae.store.db import Conn

log = logging.getLogger(__name__)

_FILE = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")
MIGRATION_LOCK = 0x686F726165  # "horae"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def migrations() -> list[Migration]:
    """All migrations shipped with this version, in order."""
    found = []
    for entry in resources.files("horae.store.migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), entry.name, entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 001.. without gaps, found {versions}")
    return found


async def apply_migrations(conn: asyncpg.Connection[asyncpg.Record]) -> list[str]:
    """Apply missing migrations; return the names applied (empty when up to date)."""
    applied: list[str] = []
    async with conn.transaction():
        await conn.execute(Q["lock_migrations"], MIGRATION_LOCK)
        await conn.execute(Q["create_migrations_table"])
        done = {r["version"]: r["checksum"] for r in await conn.fetch(Q["applied_migrations"])}
        for m in migrations():
            if m.version in done:
                if done[m.version] != m.checksum:
                    raise RuntimeError(f"migration {m.name} changed after it was applied")
                continue
            log.info("applying migration %s", m.name)
            await conn.execute(m.sql)
            await conn.execute(Q["record_migration"], m.version, m.name, m.checksum)
            applied.append(m.name)
    return applied


PRUNE_BATCH = 5000
"""Ended jobs deleted per transaction by the maintenance (`horae_prune_jobs`)."""


@dataclass(frozen=True)
class Maintained:
    created: list[date]
    """Daily partitions created."""
    dropped: int
    """Daily partitions dropped past retention."""
    pruned: int
    """Rows of jobs deleted: ended before the oldest execution kept, none of theirs left."""


@translated
async def maintain_partitions(
    conn: Conn,
    *,
    today: date,
    ahead_days: int,
    retention_days: int,
    prune_jobs: bool = True,
    batch: int = PRUNE_BATCH,
    go_on: Callable[[], Awaitable[bool]] | None = None,
) -> Maintained:
    """Create daily partitions from yesterday to today + ahead; drop those past retention;
    then, with `prune_jobs`, the jobs that ended before what is kept and have no execution
    left (completed one-offs, cancelled jobs: `batch` rows a transaction, asking `go_on`
    between two batches whether to go on: the rest waits for the next pass when it says
    no), and the history `horae explain` reads that only explained what is gone
    (`history_kept_from`)."""
    created = []
    for offset in range(-1, ahead_days + 1):
        day = today + timedelta(days=offset)
        if await conn.fetchval(Q["create_partition"], day):
            created.append(day)
    dropped: int = await conn.fetchval(Q["drop_partitions"], today - timedelta(days=retention_days))
    kept_from = history_kept_from(today, retention_days)
    pruned = 0
    after: tuple[object, object, object] = (None, None, None)
    while prune_jobs:  # a transaction a batch, each after the last row the one before deleted
        row = await conn.fetchrow(Q["prune_jobs"], kept_from, batch, *after)
        assert row is not None
        pruned += row["pruned"]
        if row["tenant"] is None or (go_on is not None and not await go_on()):
            break
        after = (row["tenant"], row["created_at"], row["id"])
    await conn.fetchval(Q["prune_history"], kept_from)
    return Maintained(created, dropped, pruned)


@dataclass(frozen=True)
class GroupMigrated:
    group: str
    applied: list[str]
    """The migrations this run applied there (empty when its schema was up to date)."""
    dropped: int
    """Daily partitions dropped there past retention."""


@dataclass(frozen=True)
class Migrated:
    applied: list[str]
    """The migrations this run applied to the first group (empty when up to date)."""
    installation: Installation
    """The installation's settings after this run."""
    dropped: int
    """Daily partitions dropped past retention in the first group."""
    groups: list[GroupMigrated] = field(default_factory=list)
    """Every group, the first included, in name order."""


async def migrate_group(
    dsn: str,
    *,
    shards: int | None,
    retention_days: int | None,
    ahead_days: int,
    today: date,
    catalog: bool,
) -> tuple[list[str], Installation, int]:
    from horae.store.db import connect

    conn = await connect(dsn)
    try:
        applied = await apply_migrations(conn)
        async with conn.transaction():
            await conn.execute(Q["lock_migrations"], MIGRATION_LOCK)
            installation = await settle_installation(
                conn, shards=shards, retention_days=retention_days
            )
            if catalog:
                await conn.execute(Q["init_catalog"], installation.shards)
        # Ended jobs are the schedulers' hourly pass's to delete, batch by batch: the first
        # after an upgrade may have a long way to go, and a migration hook must end soon.
        maintained = await maintain_partitions(
            conn,
            today=today,
            ahead_days=ahead_days,
            retention_days=installation.retention_days,
            prune_jobs=False,
        )
        return applied, installation, maintained.dropped
    finally:
        await conn.close()


@translated
async def migrate_installation(
    dsn: str,
    *,
    shards: int | None = None,
    retention_days: int | None = None,
    ahead_days: int = 3,
    now: datetime | None = None,
) -> Migrated:
    """`horae migrate`: schema, the installation's settings (`shards` and `retention_days`
    when given; None keeps what the installation has), the catalog, then partitions by the
    installation's retention; in the first group (`dsn`), then in every other store group
    the catalog names, with the same settings."""
    from horae.store.db import connect
    from horae.store.groups import MAIN, group_url, read_catalog

    today = (now or datetime.now(UTC)).date()
    applied, installation, dropped = await migrate_group(
        dsn,
        shards=shards,
        retention_days=retention_days,
        ahead_days=ahead_days,
        today=today,
        catalog=True,
    )
    report = [GroupMigrated(MAIN, applied, dropped)]
    conn = await connect(dsn)
    try:
        catalog = await read_catalog(conn)
    finally:
        await conn.close()
    for group, address in sorted(catalog.addresses.items()):
        if group == MAIN:
            continue
        there, _, gone = await migrate_group(
            group_url(group, address, dsn),
            shards=installation.shards,
            retention_days=installation.retention_days,
            ahead_days=ahead_days,
            today=today,
            catalog=False,
        )
        report.append(GroupMigrated(group, there, gone))
    report.sort(key=lambda g: g.group)
    return Migrated(applied, installation, dropped, report)


@translated
async def migrate(dsn: str, *, ahead_days: int = 3, now: datetime | None = None) -> list[str]:
    """Migrate with the installation's settings as they are; the migrations applied."""
    return (await migrate_installation(dsn, ahead_days=ahead_days, now=now)).applied

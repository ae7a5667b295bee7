"""The installation's settings, kept in the database (one row of `installation`).

Shards and retention are facts of an installation, not of a process: `horae migrate`
decides them once (and changes retention when told to), and every process reads them
from here, so a CLI, an operator or a migration hook configured differently from the
schedulers cannot place jobs on shards nobody owns or drop history a user chose to keep.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING

from horae.errors import ConfigError
from horae.store.boundary import translated
from horae.store.queries import Q

if TYPE_CHECKING:
    from horae.store.db import Conn

DEFAULT_SHARDS = 64
"""Virtual shards of a new installation when `horae migrate` is not told otherwise."""
DEFAULT_RETENTION_DAYS = 30
"""Days of execution history a new installation keeps when not told otherwise."""


@dataclass(frozen=True)
class Installation:
    shards: int
    """Virtual shards: fixed when the installation is created."""
    retention_days: int
    """Execution history kept, in whole daily partitions."""


def history_kept_from(today: date, retention_days: int) -> datetime:
    """The oldest due time whose executions are kept: the start (UTC) of the first day not
    past retention (`migrate.maintain_partitions` drops the daily partitions before it)."""
    return datetime.combine(today - timedelta(days=retention_days), time(), UTC)


@translated
async def read_installation(conn: Conn) -> Installation:
    """The installation's settings; ConfigError when `horae migrate` has not run."""
    row = await conn.fetchrow(Q["installation"])
    if row is None:
        raise ConfigError("the database has no Horae installation yet: run `horae migrate`")
    return Installation(shards=row["shards"], retention_days=row["retention_days"])


@translated
async def settle_installation(
    conn: Conn, *, shards: int | None, retention_days: int | None
) -> Installation:
    """Record the settings of a new installation, or check and update an existing one:
    the shard count cannot change (ConfigError), retention changes when given. A value
    not given keeps what the installation has (or the default, for a new one)."""
    await conn.execute(
        Q["init_installation"],
        shards or DEFAULT_SHARDS,
        retention_days or DEFAULT_RETENTION_DAYS,
    )
    found = await read_installation(conn)
    if shards is not None and shards != found.shards:
        raise ConfigError(
            f"HORAE_SHARDS: this installation has {found.shards} shards, fixed when it was"
            f" created; {shards} was asked (leave it unset, or set it to {found.shards})"
        )
    if retention_days is not None and retention_days != found.retention_days:
        await conn.execute(Q["set_retention"], retention_days)
        found = Installation(shards=found.shards, retention_days=retention_days)
    return found

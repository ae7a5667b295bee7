"""Wall-clock time as PostgreSQL tells it.

Leases are instants written by one process (the worker that claims or heartbeats) and
compared by another (the scheduler's reaper). Read from each process's own clock, a worker
whose clock runs behind writes leases that end early in everybody else's eyes (and a reaper
whose clock runs ahead takes them early): the execution is claimed again while its first
claimant still runs it. Both take their time from one clock instead, the database's: the
local clock plus an offset measured against `clock_timestamp()` (half a loopback round trip
of error), measured again at every heartbeat or sweep.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from horae.store.db import database_now

if TYPE_CHECKING:
    from horae.store.db import Conn

log = logging.getLogger(__name__)

DRIFT_WARNING = timedelta(seconds=1)


class DatabaseClock:
    def __init__(self) -> None:
        self.offset = timedelta(0)
        """Postgres's clock minus ours."""

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset

    async def sync(self, conn: Conn) -> None:
        before = datetime.now(UTC)
        theirs = await database_now(conn)
        after = datetime.now(UTC)
        offset = theirs - (before + (after - before) / 2)
        if abs(offset - self.offset) > DRIFT_WARNING:
            log.warning(
                "this host's clock is %+.3f s off PostgreSQL's; using PostgreSQL's",
                -offset.total_seconds(),
            )
        self.offset = offset


def utc_now() -> datetime:
    """This host's clock, in UTC: the time of everything but leases (which take
    PostgreSQL's, `DatabaseClock`)."""
    return datetime.now(UTC)

"""Wall-clock time as PostgreSQL tells it.

Leases are instants written by one process (the worker that claims or heartbeats) and
compared by another (the scheduler's reaper). Read from each process's own clock, a worker
whose clock runs behind writes leases that end early in everybody else's eyes (and a reaper
whose clock runs ahead takes them early): the execution is claimed again while its first
claimant still runs it. Both take their time from one clock instead, the database's: the
local clock plus an offset measured against `clock_timestamp()`, measured again at every
heartbeat or sweep. A measurement's error is up to half its round trip, and a round trip
made while this process's loop or Postgres is busy (a burst being claimed) is long: the
offset is taken from the tightest recent measurement instead (as NTP keeps its best
samples), within what the newest one allows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from horae.store.db import database_now

if TYPE_CHECKING:
    from horae.store.db import Conn

log = logging.getLogger(__name__)

DRIFT_WARNING = timedelta(seconds=1)
KEPT_FOR = timedelta(seconds=60)
"""How long a measurement of the offset counts (clocks drift by microseconds in that time):
the offset is that of the tightest one this recent."""


@dataclass(frozen=True)
class Reading:
    """One look at Postgres's clock: ours just before asking, theirs, ours once answered."""

    before: datetime
    theirs: datetime
    after: datetime

    @property
    def low(self) -> timedelta:
        """The least the offset can be: their clock was read at `after` at the latest."""
        return self.theirs - self.after

    @property
    def high(self) -> timedelta:
        """The most the offset can be: their clock was read at `before` at the earliest."""
        return self.theirs - self.before

    @property
    def round_trip(self) -> timedelta:
        return self.after - self.before

    def agrees(self, other: Reading) -> bool:
        """Whether both can be right: their bounds overlap (else this host's clock was
        stepped in between)."""
        return self.low <= other.high and other.low <= self.high


class DatabaseClock:
    def __init__(self) -> None:
        self.offset = timedelta(0)
        """Postgres's clock minus ours."""
        self._readings: list[Reading] = []
        """The measurements of the last `KEPT_FOR` that agree with the newest, oldest first."""

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset

    async def sync(self, conn: Conn) -> None:
        before = datetime.now(UTC)
        theirs = await database_now(conn)
        self.read(Reading(before, theirs, datetime.now(UTC)))

    def read(self, reading: Reading) -> None:
        """Take a measurement: the offset becomes the midpoint of the tightest measurement
        of the last `KEPT_FOR` (the shortest round trip), within the bounds of this one.
        Those that disagree with it (the clock was stepped) are forgotten."""
        since = reading.after - KEPT_FOR
        self._readings = [r for r in self._readings if r.after > since and r.agrees(reading)] + [
            reading
        ]
        best = min(self._readings, key=lambda r: r.round_trip)
        offset = min(max(best.high - best.round_trip / 2, reading.low), reading.high)
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

"""`SingletonLease`: one Lease that one process at a time holds."""

from __future__ import annotations

import math
import time

from horae.errors import LeaseConflict
from horae.kube.leases import Lease, Leases


class SingletonLease:
    """One Lease that one process at a time holds (partition maintenance, the operator's
    leader): holding means taking it when free or expired, renewing it otherwise.

    Expiry is judged by this process's monotonic clock, never by the holder's renewTime
    (clocks differ): a version of the Lease expires `duration` after this process first
    saw it, by `hold` or by a watch that reports it through `observe`.
    """

    SIGHTINGS = 8
    """How many versions' first sightings are remembered (a watch and a list may report
    them out of order; a forgotten one counts from its next sighting: later, so safe)."""

    def __init__(
        self, leases: Leases, name: str, *, identity: str, duration: float, label: str
    ) -> None:
        self._leases = leases
        self.name = name
        self._identity = identity
        self._duration = duration
        self._label = label
        self.selector = f"{label}=true"
        """The label selector that finds the Lease (for `watch_leases`)."""
        self._first_seen: dict[str, float] = {}
        """resourceVersion -> monotonic time this process first saw it."""

    def observe(self, lease: Lease, at: float) -> None:
        """Note a version of the Lease seen elsewhere (a watch) at monotonic time `at`."""
        if lease.name == self.name:
            self._sighted(lease.resource_version, at)

    def _sighted(self, version: str, at: float) -> float:
        since = self._first_seen.setdefault(version, at)
        while len(self._first_seen) > self.SIGHTINGS:
            del self._first_seen[next(iter(self._first_seen))]
        return since

    def expires_in(self) -> float:
        """Seconds until the newest version seen so far expires (the whole duration when
        none was seen); at or below 0 a `hold` may take it."""
        now = time.monotonic()
        return max(self._first_seen.values(), default=now) + self._duration - now

    async def hold(self) -> bool:
        """Take or renew the Lease; False when another holder's Lease is still live."""
        found = [x for x in await self._leases.list(self.selector) if x.name == self.name]
        duration = max(1, math.ceil(self._duration))
        now = time.monotonic()
        try:
            if not found:
                labels = {self._label: "true"}
                await self._leases.create(self.name, self._identity, duration, labels)
                return True
            lease = found[0]
            expired = now - self._sighted(lease.resource_version, now) > self._duration
            if lease.holder in (None, self._identity) or expired:
                acquire = lease.holder != self._identity
                await self._leases.write(lease, self._identity, duration, acquire=acquire)
                return True
        except LeaseConflict:
            pass
        return False

    async def release(self) -> None:
        """Clear the holder if it is us, so another process takes over at once."""
        for lease in await self._leases.list(self.selector):
            if lease.name == self.name and lease.holder == self._identity:
                try:
                    await self._leases.write(lease, None, 1, acquire=False)
                except LeaseConflict:
                    pass

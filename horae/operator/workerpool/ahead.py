"""What falls due soon, as the autoscaler remembers it: the store is read one slice of
due time at a time (`DueSoon.next_slice`), each slice once, up to the lead ahead; the
bins it answered are kept per tenant until their last execution is due (`DueSoon.spikes`).

So each pending row is read about once, however often the autoscaler looks. An execution
created after its slice was read (one due sooner than the lead when it is created) is
not seen here: it reaches the pool's queue, which asks for it as it always did, and no
pod asked for it then could have been Ready in time anyway."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from horae.operator.workerpool.scaling import Spike
from horae.store.due import BIN, DueCount

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _bin(at: datetime) -> int:
    return int((at - _EPOCH) // BIN)


class DueSoon:
    """Executions due ahead, per tenant and bin of due time (pure: no I/O)."""

    def __init__(self) -> None:
        self._read_until: datetime | None = None
        self._bins: dict[tuple[str, int], Spike] = {}

    def next_slice(self, now: datetime, horizon: timedelta) -> tuple[datetime, datetime] | None:
        """The due times to read now, [since, until): from where the last read ended (or
        `now`) to `now + horizon`; None when that is read already."""
        since = now if self._read_until is None else max(self._read_until, now)
        until = now + horizon
        return (since, until) if since < until else None

    def add(self, until: datetime, rows: Iterable[DueCount]) -> None:
        """What the read of the slice ending at `until` answered (a bin cut by a slice's
        edge is put back together)."""
        self._read_until = until
        for row in rows:
            key = (row.tenant, _bin(row.first_due))
            had = self._bins.get(key)
            if had is None:
                self._bins[key] = Spike(row.first_due, row.last_due, row.count)
            else:
                self._bins[key] = Spike(
                    min(had.first, row.first_due),
                    max(had.last, row.last_due),
                    had.count + row.count,
                )

    def forget_passed(self, now: datetime) -> None:
        """Drop the bins whose last execution is due before `now`."""
        self._bins = {k: s for k, s in self._bins.items() if s.last >= now}

    def spikes(self, tenants: Iterable[str]) -> list[Spike]:
        """The bins of `tenants`, each bin's counts summed over them (a pool serving several
        tenants takes all of theirs)."""
        wanted = set(tenants)
        summed: dict[int, Spike] = {}
        for (tenant, key), spike in self._bins.items():
            if tenant not in wanted:
                continue
            had = summed.get(key)
            summed[key] = (
                spike
                if had is None
                else Spike(
                    min(had.first, spike.first), max(had.last, spike.last), had.count + spike.count
                )
            )
        return [summed[k] for k in sorted(summed)]

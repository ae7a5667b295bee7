"""PostgreSQL's side of a sustained run, second by second, beside the start lag: dead row
versions in the executions partitions, sessions waiting on a lock, autovacuum runs. A run
that does not hold then says whether vacuum or lock waits went with its lag (issue 22).

Sampled every `EVERY` seconds in every store group's database, summed over the groups, and
reduced per second after the scenario's first due time: dead row versions as last seen
(`pg_stat_user_tables`, which backends update about once a second), lock-waiting sessions
as the mean of the samples (so lock-wait seconds per second, by Little's law), autovacuum
runs of an executions partition as how many ended in that second (`autovacuum_count`).
"""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from datetime import UTC, datetime

from bench.load import pct
from bench.stores import Stores

EVERY = 0.25
SAMPLE = """
SELECT t.dead, t.autovacuum, count(*) FILTER (WHERE a.wait_event_type = 'Lock') AS lock_waiting
FROM (SELECT coalesce(sum(n_dead_tup), 0) AS dead, coalesce(sum(autovacuum_count), 0) AS autovacuum
      FROM pg_stat_user_tables WHERE relname LIKE 'executions%') t,
     pg_stat_activity a
WHERE a.datname = current_database()
GROUP BY t.dead, t.autovacuum
"""


KEYS = ("lock_waiting", "dead_tuples", "autovacuum")


def _sampled(values: list[float]) -> list[float]:
    """The seconds that had a sample (NaN marks one without)."""
    return [v for v in values if not math.isnan(v)]


class PgWatch:
    def __init__(self, stores: Stores, first_due: datetime) -> None:
        self._stores = stores
        self._first_due = first_due
        self._samples: list[tuple[float, int, int, int]] = []
        """(seconds after the first due time, dead, lock_waiting, autovacuum runs so far), summed
        over the groups."""

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            rows = await self._stores.concat(SAMPLE)
            at = (datetime.now(UTC) - self._first_due).total_seconds()
            dead, waiting, vacuum = (
                sum(int(r[k]) for r in rows) for k in ("dead", "lock_waiting", "autovacuum")
            )
            self._samples.append((at, dead, waiting, vacuum))
            try:
                await asyncio.wait_for(stop.wait(), EVERY)
            except TimeoutError:
                pass

    def per_second(self) -> dict[str, list[float]]:
        """dead_tuples, lock_waiting and autovacuum (runs ended), one value per second from the
        first due time (NaN for a second without a sample)."""
        seconds: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        for at, dead, waiting, vacuum in self._samples:
            if at >= 0:
                seconds[math.floor(at)].append((dead, waiting, vacuum))
        length = max(seconds, default=-1) + 1
        out: dict[str, list[float]] = {"dead_tuples": [], "lock_waiting": [], "autovacuum": []}
        runs = self._samples[0][3] if self._samples else 0
        for s in range(length):
            got = seconds.get(s)
            out["dead_tuples"].append(got[-1][0] if got else math.nan)
            out["lock_waiting"].append(sum(g[1] for g in got) / len(got) if got else math.nan)
            out["autovacuum"].append(got[-1][2] - runs if got else math.nan)
            runs = got[-1][2] if got else runs
        return out


def report(series: dict[str, list[float]], lags: list[float], starts: list[float]) -> list[str]:
    """Lines beside the lag, one per 5 s: starts a second, p99 start lag of the executions
    started then, lock-waiting sessions, dead row versions, autovacuum runs ended."""
    by_window: dict[int, list[float]] = defaultdict(list)
    for lag, start in zip(lags, starts, strict=True):
        by_window[math.floor(start / 5)].append(lag)
    lines = ["  s    starts/s  p99 lag  lock-waiting  dead rows  autovacuums"]
    for w in sorted(by_window):
        part = slice(w * 5, w * 5 + 5)
        locks, dead, vacuum = (_sampled(series[k][part]) for k in KEYS)
        lines.append(
            f"{w * 5:4d}  {len(by_window[w]) / 5:9.0f}  {pct(by_window[w], 99):6.2f} s"
            f"  {sum(locks) / len(locks) if locks else math.nan:12.2f}"
            f"  {max(dead) if dead else math.nan:9.0f}  {sum(vacuum) if vacuum else math.nan:11.0f}"
        )
    return lines


def summary(series: dict[str, list[float]]) -> str:
    """One clause for a Result's notes."""
    locks, dead, vacuum = (_sampled(series[k]) for k in KEYS)
    if not locks:
        return "PostgreSQL not sampled"
    return (f"lock-waiting sessions mean {sum(locks) / len(locks):.2f}, worst second "
            f"{max(locks):.2f}; dead row versions in executions up to {max(dead):,.0f}; "
            f"autovacuum runs {sum(vacuum):.0f} in {len(vacuum)} s")  # fmt: skip

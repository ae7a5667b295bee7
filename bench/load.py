"""The load every system in the benchmark gets: who is due when.

Plain Python with no Horae import, so the peers' environment (bench/peers/) drives exactly
the same arrivals as Horae's. A scenario is a list of `Arrival`s; a driver creates one
job (one-off, due at `due`) per arrival, ahead of time, and the system under test must
start a no-op handler for each as close to `due` as it can.

Results are reported the same way by every driver (`Result`), one JSON line each.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

TENANTS = 10


@dataclass(frozen=True)
class Arrival:
    seq: int
    due: datetime
    tenant: str


def sustained(rate: int, seconds: int, start: datetime) -> list[Arrival]:
    """`rate` executions per second for `seconds`, spread evenly within each second."""
    return [
        Arrival(i, start + timedelta(seconds=i / rate), f"t{i % TENANTS}")
        for i in range(rate * seconds)
    ]


def top_of_hour(count: int, due: datetime) -> list[Arrival]:
    """`count` executions due in the same second (the same instant)."""
    return [Arrival(i, due, f"t{i % TENANTS}") for i in range(count)]


def by_second(arrivals: list[Arrival]) -> list[list[Arrival]]:
    """Arrivals grouped by the whole second they are due in, for creating just ahead."""
    groups: dict[int, list[Arrival]] = {}
    first = arrivals[0].due
    for a in arrivals:
        groups.setdefault(math.floor((a.due - first).total_seconds()), []).append(a)
    return [groups[k] for k in sorted(groups)]


def pct(values: list[float], p: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


@dataclass
class Result:
    """What a driver prints (one JSON line) after a scenario.

    `lags` are handler start - due, in seconds, one per started execution; `starts` are
    handler start - the first due time of the scenario, in the same order (the
    throughput-over-time plot is their histogram)."""

    system: str
    scenario: str
    expected: int
    started: int
    lags: list[float]
    starts: list[float] = field(default_factory=list)
    rate: int = 0
    count: int = 0
    last_start_s: float = math.nan  # last handler start - the first due time
    peak_rss_mib: dict[str, float] = field(default_factory=dict)
    statements_per_execution: float | None = None
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # over the measured window
    notes: str = ""
    groups: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per store group (a system whose store is split over several databases): its own
    figures, e.g. executions, statements_per_execution, wal_kib_per_execution,
    postgres_cpu_seconds. Empty for the others (and in results from before it existed)."""
    postgres: dict[str, list[float]] = field(default_factory=dict)
    """Horae's sustained runs: PostgreSQL second by second from the first due time
    (bench.pgwatch): dead_tuples, lock_waiting, autovacuum. Empty for the others."""

    @property
    def p50(self) -> float:
        return pct(self.lags, 50)

    @property
    def p99(self) -> float:
        return pct(self.lags, 99)

    @property
    def max(self) -> float:
        return max(self.lags) if self.lags else math.nan

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, line: str) -> Result:
        return cls(**json.loads(line))


def starts_per_second(starts: list[float]) -> list[int]:
    """Handler starts in each second after the first due time (for throughput plots)."""
    if not starts:
        return []
    out = [0] * (math.floor(max(starts)) + 1)
    for s in starts:
        out[max(0, math.floor(s))] += 1
    return out


def peak_rss_mib(pid: int) -> float:
    """Peak resident memory (VmHWM) of a live process, in MiB; NaN once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


TICK = os.sysconf("SC_CLK_TCK")
SERVERS = {"postgres": "postgres", "beam.smp": "rabbitmq", "kube-apiserver": "kube-apiserver",
           "etcd": "etcd"}  # fmt: skip


def processes() -> Iterator[tuple[int, int, str, float, float]]:
    """(pid, parent pid, command name, CPU seconds used so far, CPU seconds of its children
    that ended and it reaped) of every process."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        seconds = (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
        reaped = (int(fields[13]) + int(fields[14])) / TICK  # cutime, cstime
        yield int(entry), int(fields[1]), comm, seconds, reaped


def cpu_snapshot(named: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user + system) used so far by each named process and, summed over
    their processes, by the shared servers (PostgreSQL, RabbitMQ, kube-apiserver, etcd).
    "postgres" counts every PostgreSQL cluster on the machine (a process is one of the
    server's by its command name alone, whatever its cluster or user).
    The difference of two snapshots is where a run's CPU went."""
    out: dict[str, float] = dict.fromkeys([*named, *SERVERS.values()], 0.0)
    by_pid = {pid: name for name, pid in named.items()}
    for pid, _, comm, seconds, _ in processes():
        if pid in by_pid:
            out[by_pid[pid]] += seconds
        elif comm in SERVERS:
            out[SERVERS[comm]] += seconds
    return out


def cluster_cpu(postmasters: dict[str, int]) -> dict[str, float]:
    """CPU seconds used so far by each named PostgreSQL cluster: its postmaster (by pid) and
    the processes it forked (backends, checkpointer, walwriter, autovacuum, ...), those that
    ended too (the postmaster reaps them: its children's time). The clusters' split of
    cpu_snapshot's "postgres", which counts live processes only: a backend that ends within
    a window takes its CPU time out of that figure, not out of this one."""
    out = dict.fromkeys(postmasters, 0.0)
    by_pid: dict[int, str] = {}
    for name, pid in postmasters.items():
        by_pid.setdefault(pid, name)  # a cluster of several groups counts for the first
    for pid, ppid, _, seconds, reaped in processes():
        if pid in by_pid:
            out[by_pid[pid]] += seconds + reaped
        elif ppid in by_pid:
            out[by_pid[ppid]] += seconds
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(after.get(k, 0.0) - v, 2) for k, v in before.items()}

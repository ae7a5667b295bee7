"""What the peer drivers share: arguments, a fresh database, child processes, the no-op
handler's record of when it started, the pacing of creations and the `Result` line.

Runs in `.venv-peers` (no Horae import); only `bench.load` comes from the repo.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from bench.load import Arrival, Result, by_second, peak_rss_mib, sustained, top_of_hour

BASE_DB = os.environ.get("HORAE_DATABASE_URL", "postgresql://horae:horae@127.0.0.1:5433/horae")
BROKER = os.environ.get("HORAE_BROKER_URL", "amqp://horae:horae@127.0.0.1:5672/horae")
REPO = Path(__file__).resolve().parents[2]
RECORD_DIR_ENV = "BENCH_PEERS_RECORD_DIR"
AHEAD = 2.0  # seconds: each second's arrivals are created this long before it, as for Horae
SUSTAINED_START = 3.0  # seconds from "ready" to the first due time of a sustained run


@dataclass(frozen=True)
class Args:
    scenario: str  # "sustained" | "top"
    rate: int
    seconds: int
    count: int
    lead: float  # top: seconds from "ready" to the instant all are due
    timeout: float  # seconds after the last due time to wait for the stragglers

    def arrivals(self, now: datetime) -> list[Arrival]:
        if self.scenario == "sustained":
            return sustained(self.rate, self.seconds, now + timedelta(seconds=SUSTAINED_START))
        return top_of_hour(self.count, now + timedelta(seconds=self.lead))


def parse_args(description: str | None, create_seconds_per_job: float = 0.0) -> Args:
    """The driver's arguments. Without --lead, a top run gives the peer 20 s plus
    `create_seconds_per_job` x count to create its jobs (a peer that can only add them
    one statement or one message at a time needs longer than 20 s for 20,000, and the
    scenario measures the start at the due instant, not ingest: all are created first)."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenario", choices=["sustained", "top"], default="sustained")
    parser.add_argument("--rate", type=int, default=100, help="sustained: executions due per s")
    parser.add_argument("--seconds", type=int, default=30, help="sustained: how long")
    parser.add_argument("--count", type=int, default=20_000, help="top: executions due at once")
    parser.add_argument("--lead", type=float, default=None,
                        help="top: seconds until due (default 20 + time to create)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds after the last due time to wait for starts")  # fmt: skip
    a = parser.parse_args()
    lead = a.lead if a.lead is not None else 20.0 + a.count * create_seconds_per_job
    return Args(a.scenario, a.rate, a.seconds, a.count, lead, a.timeout)


# -- the handler's record --------------------------------------------------------------------

_record_lock = threading.Lock()
_record_file: IO[str] | None = None


def record(seq: int) -> None:
    """The no-op handler's only work: note (seq, now) in this process's file, flushed."""
    global _record_file
    now = time.time()
    with _record_lock:
        if _record_file is None:
            path = Path(os.environ[RECORD_DIR_ENV]) / f"{os.getpid()}.log"
            _record_file = open(path, "a", buffering=1)  # noqa: SIM115 - lives with the process
        _record_file.write(f"{seq} {now:.6f}\n")


def read_records(directory: Path) -> tuple[dict[int, float], int]:
    """The first start of each seq, and how many starts were repeats (at-least-once)."""
    first: dict[int, float] = {}
    repeats = 0
    for path in directory.glob("*.log"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) != 2:
                continue  # a line being written right now
            seq, at = int(parts[0]), float(parts[1])
            if seq in first:
                repeats += 1
                first[seq] = min(first[seq], at)
            else:
                first[seq] = at
    return first, repeats


def count_records(directory: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in directory.glob("*.log"))


# -- resources -------------------------------------------------------------------------------


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


@contextmanager
def fresh_database(system: str) -> Iterator[str]:
    """A database of its own on the local PostgreSQL, dropped (WITH FORCE) afterwards."""
    name = f"peers_{system}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(BASE_DB, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_database(BASE_DB, name)
    finally:
        with psycopg.connect(BASE_DB, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@dataclass
class Processes:
    """Child processes of a run, each in a session of its own so that stopping one stops
    whatever it forked; their output goes to our stderr (stdout carries the result)."""

    env: dict[str, str]
    children: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, argv: list[str]) -> None:
        self.children[name] = subprocess.Popen(
            argv,
            cwd=REPO,
            env=self.env,
            stdout=sys.stderr,
            stderr=sys.stderr,
            start_new_session=True,
        )

    def check_alive(self) -> None:
        for name, p in self.children.items():
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited early with {p.returncode}")

    def peak_rss(self) -> dict[str, float]:
        return {name: round(peak_rss_mib(p.pid), 1) for name, p in self.children.items()}

    def stop(self) -> None:
        for p in self.children.values():
            _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self.children.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(p, signal.SIGKILL)
            p.wait()


def _signal_group(p: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


@contextmanager
def run_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="horae-peers-") as d:
        yield Path(d)


def python_m(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def version(distribution: str) -> str:
    return importlib.metadata.version(distribution)


def venv_bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def wait_until(ready: Callable[[], bool], what: str, processes: Processes, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        processes.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {seconds:.0f}s")
        time.sleep(0.2)


# -- the load and the result -----------------------------------------------------------------


async def create_paced(
    args: Args, arrivals: list[Arrival], create: Callable[[list[Arrival]], Awaitable[None]]
) -> float:
    """Create the jobs as Horae's drivers do: sustained, each second's arrivals ~2 s ahead
    of that second; top, all at once. Returns how late the last creation finished relative
    to its deadline (the second's start - 2 s, or the due instant), in seconds (≤ 0: in time)."""
    late = -math.inf
    if args.scenario == "top":
        await create(arrivals)
        return (datetime.now(UTC) - arrivals[0].due).total_seconds()
    first = arrivals[0].due
    for k, group in enumerate(by_second(arrivals)):
        second = first + timedelta(seconds=k)
        ahead = (second - datetime.now(UTC)).total_seconds() - AHEAD
        if ahead > 0:
            await asyncio.sleep(ahead)
        await create(group)
        late = max(late, (datetime.now(UTC) - second).total_seconds() + AHEAD)
    return late


async def run_load(
    args: Args, arrivals: list[Arrival], records: Path, processes: Processes,
    create: Callable[[list[Arrival]], Awaitable[None]],
) -> tuple[float, dict[str, float]]:  # fmt: skip
    """Create the arrivals paced (`create_paced`), wait until all started (or the timeout),
    then read each process's peak memory. Returns (how late the last creation was, peak)."""
    late = await create_paced(args, arrivals, create)
    await asyncio.to_thread(wait_for_starts, records, arrivals, args.timeout)
    return late, processes.peak_rss()


def wait_for_starts(directory: Path, arrivals: list[Arrival], timeout: float) -> None:
    last_due = max(a.due for a in arrivals)
    deadline = last_due + timedelta(seconds=timeout)
    while datetime.now(UTC) < deadline:
        if count_records(directory) >= len(arrivals):
            return
        time.sleep(0.5)


def result(
    system: str,
    args: Args,
    arrivals: list[Arrival],
    directory: Path,
    peak: dict[str, float],
    notes: str,
) -> Result:
    first_start, repeats = read_records(directory)
    first_due = min(a.due for a in arrivals).timestamp()
    lags: list[float] = []
    starts: list[float] = []
    for a in arrivals:
        at = first_start.get(a.seq)
        if at is not None:
            lags.append(round(at - a.due.timestamp(), 6))
            starts.append(round(at - first_due, 6))
    if args.scenario == "top":
        notes += f" All created {args.lead:.0f}s ahead of the due instant."
    if repeats:
        notes += f" {repeats} repeated starts (counted once, at the first)."
    return Result(
        system=system,
        scenario=args.scenario,
        expected=len(arrivals),
        started=len(lags),
        lags=lags,
        starts=starts,
        rate=args.rate if args.scenario == "sustained" else 0,
        count=args.count if args.scenario == "top" else 0,
        last_start_s=max(starts) if starts else math.nan,
        peak_rss_mib=peak,
        notes=notes,
    )


def summary(r: Result) -> str:
    """A human line for stderr (stdout's last line is the JSON)."""
    return (
        f"{r.system} {r.scenario} rate={r.rate} count={r.count}: started {r.started}/"
        f"{r.expected}, lag p50 {r.p50:.3f}s p99 {r.p99:.3f}s max {r.max:.3f}s, "
        f"last start {r.last_start_s:.1f}s, peak RSS {r.peak_rss_mib}"
    )


def report(r: Result) -> None:
    print(summary(r), file=sys.stderr)
    print(r.to_json(), flush=True)

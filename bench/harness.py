"""What the end-to-end benchmarks share: a fresh database on the local PostgreSQL (or, for a
store split over two store groups, one on each of the two local clusters), a control plane
of their own (hack/k8s-up.sh), a fresh RabbitMQ prefix, and `horae` processes started beside
the benchmark and stopped after it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import aio_pika
import asyncpg

from bench.load import peak_rss_mib
from horae.broker import Names
from horae.store.migrate import migrate
from horae.store.moves import add_group, move_shards
from tests.support.kube import start_control_plane, stop_control_plane

REPO = Path(__file__).resolve().parents[1]
BASE_DB = os.environ.get("HORAE_DATABASE_URL", "postgresql://horae:horae@127.0.0.1:5433/horae")
BROKER = os.environ.get("HORAE_BROKER_URL", "amqp://horae:horae@127.0.0.1:5672/horae")
SECOND_DB = os.environ.get(
    "HORAE_SECOND_DATABASE_URL", "postgresql://horae:horae@127.0.0.1:5434/horae"
)  # the second cluster's base database (hack/services.sh: horae2)
HORAE = str(Path(sys.executable).parent / "horae")
SHARDS = 64  # the installation's default, which the benchmarks keep


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


@dataclass(frozen=True)
class Group:
    """One store group of a run: its scratch database, and its cluster's base database
    (where pg_stat_statements is read and the scratch database is created and dropped)."""

    name: str
    url: str
    base_url: str

    @property
    def database(self) -> str:
        return urlsplit(self.url).path.lstrip("/")


@dataclass
class System:
    db_url: str
    env: dict[str, str]
    named: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    groups: list[Group] = field(default_factory=list)
    """The store's groups, the first (`main`, at db_url) first."""

    @property
    def processes(self) -> list[subprocess.Popen[bytes]]:
        return list(self.named.values())

    def start(self, identity: str, *args: str, env: dict[str, str] | None = None) -> None:
        self.named[identity] = subprocess.Popen(
            [HORAE, *args], cwd=REPO, env={**self.env, **(env or {}), "HORAE_IDENTITY": identity}
        )

    def signal(self, identity: str, sig: int) -> None:
        self.named[identity].send_signal(sig)

    def wait(self, identity: str, timeout: float = 60) -> int:
        return self.named[identity].wait(timeout=timeout)

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.named.items() if p.poll() is None}

    def peak_rss_mib(self) -> dict[str, float]:
        """Peak resident memory (VmHWM) of each process still running, in MiB."""
        live = {name: p for name, p in self.named.items() if p.poll() is None}
        return {name: round(peak_rss_mib(p.pid), 1) for name, p in live.items()}


@asynccontextmanager
async def scratch_database(
    prefix: str, base: str = BASE_DB, *, migrated: bool = True
) -> AsyncIterator[str]:
    """A database of its own next to `base` (its URL), migrated unless told not to (a
    group's is migrated as it is added), dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(base)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        url = urlunsplit(urlsplit(base)._replace(path="/" + name))
        if migrated:
            await migrate(url)
        yield url
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@asynccontextmanager
async def scratch_store(
    prefix: str, groups: int = 1, *, one_cluster: bool = False
) -> AsyncIterator[list[Group]]:
    """A migrated store: one group on BASE_DB's cluster, or two (the second, `second`, on
    SECOND_DB's cluster, or with `one_cluster` a second database on BASE_DB's, holding the
    odd shards), set up before any process starts."""
    if groups not in (1, 2):
        raise ValueError(f"groups: 1 or 2, not {groups}")
    async with scratch_database(prefix) as main:
        store = [Group("main", main, BASE_DB)]
        if groups == 1:
            yield store
            return
        base = BASE_DB if one_cluster else SECOND_DB
        async with scratch_database(prefix, base, migrated=False) as url:
            await add_group(main, "second", url)
            await move_shards(main, list(range(1, SHARDS, 2)), "second")
            yield [*store, Group("second", url, base)]


async def delete_topology(prefix: str) -> None:
    """A run's queues and exchanges: idle quorum queues left behind by every run would keep
    RabbitMQ busy (each is a Raft group) in the runs after it."""
    names = Names(prefix)
    exchanges, queues = names.declared
    queues = (*queues, names.pool_queue("default", "default"))  # the workers' (HORAE_NAMESPACE)
    connection = await aio_pika.connect(BROKER)
    try:
        channel = await connection.channel()
        for queue in queues:
            await channel.queue_delete(queue)
        for exchange in exchanges:
            await channel.exchange_delete(exchange)
    finally:
        await connection.close()


@asynccontextmanager
async def horae_system(
    name: str, groups: int = 1, *, one_cluster: bool = False
) -> AsyncIterator[System]:
    async with scratch_store(f"horae_{name}", groups, one_cluster=one_cluster) as store:
        db_url = store[0].url
        plane = start_control_plane(Path(tempfile.mkdtemp(prefix="horae-bench-k8s-")))
        prefix = f"{name}{uuid.uuid4().hex[:6]}"
        system = System(db_url, {
            **os.environ, **plane.env, "HORAE_DATABASE_URL": db_url, "HORAE_BROKER_URL": BROKER,
            "HORAE_BROKER_PREFIX": prefix, "HORAE_NAMESPACE": "default",
            "HORAE_LOG_LEVEL": os.environ.get("HORAE_LOG_LEVEL", "WARNING"),
        }, groups=store)  # fmt: skip
        try:
            yield system
        finally:
            for p in system.processes:
                if p.poll() is None:
                    p.terminate()
            for p in system.processes:
                p.wait(timeout=30)
            stop_control_plane(plane)
            await delete_topology(prefix)

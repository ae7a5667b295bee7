"""What the end-to-end benchmarks share: a fresh database on the local PostgreSQL, a
control plane of their own (hack/k8s-up.sh), a fresh RabbitMQ prefix, and `horae`
processes started beside the benchmark and stopped after it."""

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
from tests.support.kube import start_control_plane, stop_control_plane

REPO = Path(__file__).resolve().parents[1]
BASE_DB = os.environ.get("HORAE_DATABASE_URL", "postgresql://horae:horae@127.0.0.1:5433/horae")
BROKER = os.environ.get("HORAE_BROKER_URL", "amqp://horae:horae@127.0.0.1:5672/horae")
HORAE = str(Path(sys.executable).parent / "horae")


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


@dataclass
class System:
    db_url: str
    env: dict[str, str]
    named: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def processes(self) -> list[subprocess.Popen[bytes]]:
        return list(self.named.values())

    def start(self, identity: str, *args: str) -> None:
        self.named[identity] = subprocess.Popen(
            [HORAE, *args], cwd=REPO, env={**self.env, "HORAE_IDENTITY": identity}
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
async def scratch_database(prefix: str) -> AsyncIterator[str]:
    """A migrated database of its own next to BASE_DB (its URL), dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(BASE_DB)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        url = urlunsplit(urlsplit(BASE_DB)._replace(path="/" + name))
        await migrate(url)
        yield url
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


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
async def horae_system(name: str) -> AsyncIterator[System]:
    async with scratch_database(f"horae_{name}") as db_url:
        plane = start_control_plane(Path(tempfile.mkdtemp(prefix="horae-bench-k8s-")))
        prefix = f"{name}{uuid.uuid4().hex[:6]}"
        system = System(db_url, {
            **os.environ, **plane.env, "HORAE_DATABASE_URL": db_url, "HORAE_BROKER_URL": BROKER,
            "HORAE_BROKER_PREFIX": prefix, "HORAE_NAMESPACE": "default",
            "HORAE_LOG_LEVEL": os.environ.get("HORAE_LOG_LEVEL", "WARNING"),
        })  # fmt: skip
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

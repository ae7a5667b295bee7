"""The seeded fault schedule and its injection.

`plan(seed, duration)` draws the schedule up front: every kind of fault once in a seeded
order, then kinds drawn by weight; each fault is followed by a calm gap of a few seconds
(so some executions fall due untouched and their start lag can be measured).
`Injector` carries it out against the running cluster and logs what it did to whom,
from when to when (the checker's `Fault`s).
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import asyncpg

from tests.chaos.checker import Fault
from tests.chaos.servers import Postgres, RabbitMQ
from tests.support.processes import FAKETIME_LIB, HAS_FAKETIME, Component, clock_offset_env

KINDS = {
    # kind: weight
    "kill": 5, "pause": 3, "zombie": 3, "term": 2, "rolling": 1, "pg_restart": 1,
    "mq_restart": 1, "pg_terminate": 2, "long_txn": 1, "clock": 1, "partition": 1,
}  # fmt: skip
ROLES = ("api", "scheduler", "worker", "operator")


@dataclass(frozen=True)
class Planned:
    at: float
    """Seconds after the fault phase began."""
    kind: str
    role: str
    duration: float
    pick: int
    """Which live replica of `role` (modulo how many there are at that moment)."""
    detail: str = ""


def group_plan(duration: float) -> list[Planned]:
    """The two-group run's faults: the second group's primary down for 30 s, then a quarter
    of the shards moved between groups, each under load."""
    down_at = min(10.0, duration / 6)
    return [
        Planned(down_at, "group_down", "postgres", 30.0, 0),
        Planned(down_at + 30.0 + 10.0, "move_shards", "store", 0.0, 0),
    ]


def plan(seed: int, duration: float, *, lease: float, scheduler_lease: float) -> list[Planned]:
    rng = random.Random(seed)
    out: list[Planned] = []
    t = rng.uniform(2, 5)
    kinds, weights = zip(*KINDS.items(), strict=True)
    first = list(kinds)  # every kind once, in a seeded order, then drawn by weight
    rng.shuffle(first)
    while t < duration:
        kind = first.pop() if first else rng.choices(kinds, weights)[0]
        role = rng.choice(ROLES)
        detail = ""
        if kind == "pause":
            length = rng.uniform(0.5, 2.5)
        elif kind == "zombie":  # paused past its lease: it wakes up believing it owns things
            role = rng.choice(("scheduler", "worker"))
            length = (scheduler_lease if role == "scheduler" else lease) + rng.uniform(2, 5)
        elif kind == "kill":
            length = rng.uniform(0.5, 3)  # until a replacement starts
        elif kind in ("term", "rolling"):
            length = 0.0
        elif kind == "pg_restart":
            role, detail, length = "postgres", rng.choice(("fast", "immediate")), 0.0
        elif kind == "mq_restart":
            role, length = "rabbitmq", 0.0
        elif kind == "pg_terminate":
            role, length = "postgres", 0.0
        elif kind == "long_txn":
            role, length = "postgres", rng.uniform(15, 30)
        elif kind == "clock":
            role = "worker"
            detail = rng.choice(("-2", "+2", "+10"))
            length = rng.uniform(10, 20)
        else:  # partition
            role, length = "scheduler", (scheduler_lease + rng.uniform(2, 6))
        out.append(Planned(round(t, 2), kind, role, round(length, 2), rng.randrange(1000), detail))
        t += (0 if kind == "long_txn" else length) + rng.uniform(4, 9)  # long_txn: background
    return out


@dataclass
class Cluster:
    """What the injector acts on: the replicas by role, how to start a replacement."""

    replicas: dict[str, list[Component]]
    start: Callable[..., Component]
    """start(role, wrapper=(), env=None) -> a new replica of `role` (already in `replicas`)."""
    postgres: Postgres
    rabbitmq: RabbitMQ
    partition: Callable[[float], Awaitable[str]] | None = None
    """Start a partitioned scheduler, cut it off for `seconds`, heal; returns its identity."""
    partition_skipped: str = ""
    """Why there is no partition fault here, when there is none."""
    second: Postgres | None = None
    """The second store group's PostgreSQL, when the store has two groups."""
    move: Callable[[], Awaitable[str]] | None = None
    """Move a quarter of the shards to the other group; returns what it moved."""


@dataclass
class Injector:
    cluster: Cluster
    faults: list[Fault] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    _background: list[asyncio.Task[None]] = field(default_factory=list)

    def _pick(self, p: Planned) -> Component | None:
        live = [c for c in self.cluster.replicas[p.role] if c.alive()]
        if not live:
            self.skipped.append(f"{p.kind}: no live {p.role} at that moment")
            return None
        return live[p.pick % len(live)]

    def _log(self, kind: str, target: str, start: float, detail: str = "") -> None:
        self.faults.append(Fault(kind, target, start, time.time(), detail))

    async def run(self, schedule: list[Planned], began: float) -> None:
        for p in schedule:
            delay = began + p.at - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                await self.inject(p)
            except Exception as exc:  # a tool failing (rabbitmqctl, ip) must not end the run
                self.skipped.append(f"{p.kind} at {p.at:.0f} s failed: {exc!r}"[:300])
                await self.heal_processes()

    async def _replace(self, victim: Component, **kwargs: object) -> Component:
        role = victim.name
        self.cluster.replicas[role].remove(victim)
        return await asyncio.to_thread(self.cluster.start, role, **kwargs)

    async def inject(self, p: Planned) -> None:
        c = self.cluster
        start = time.time()
        if p.kind == "kill":
            victim = self._pick(p)
            if victim is None:
                return
            victim.kill()
            await asyncio.sleep(p.duration)
            self._log("kill", victim.identity, start)
            await self._replace(victim)
        elif p.kind in ("pause", "zombie"):
            victim = self._pick(p)
            if victim is None:
                return
            victim.signal(signal.SIGSTOP)
            try:
                await asyncio.sleep(p.duration)
            finally:
                victim.signal(signal.SIGCONT)
            self._log(p.kind, victim.identity, start)
        elif p.kind == "term":
            victim = self._pick(p)
            if victim is None:
                return
            await asyncio.to_thread(victim.stop, 30)
            self._log("term", victim.identity, start)
            await self._replace(victim)
        elif p.kind == "rolling":
            for victim in list(c.replicas[p.role]):
                one = time.time()
                await asyncio.to_thread(victim.stop, 30)
                self._log("term", victim.identity, one)
                await self._replace(victim)
                await asyncio.sleep(1)
        elif p.kind == "pg_restart":
            await asyncio.to_thread(c.postgres.restart, p.detail)
            self._log("pg_restart", "postgres", start, p.detail)
        elif p.kind == "mq_restart":
            await asyncio.to_thread(c.rabbitmq.restart)
            self._log("mq_restart", "rabbitmq", start)
        elif p.kind == "pg_terminate":
            await self._terminate_backends()
            self._log("pg_terminate", "postgres", start)
        elif p.kind == "long_txn":  # held in the background while other faults go on

            async def hold() -> None:
                await self._long_transaction(p.duration)
                self._log("long_txn", "postgres", start)

            self._background.append(asyncio.create_task(hold()))
        elif p.kind == "clock":
            if not HAS_FAKETIME:
                self.skipped.append(f"clock: no {FAKETIME_LIB} (apt-get install faketime)")
                return
            victim = self._pick(p)
            if victim is None:
                return
            await asyncio.to_thread(victim.stop, 30)
            self._log("term", victim.identity, start)
            skewed = await self._replace(victim, env={
                **clock_offset_env(p.detail), "HORAE_CHAOS_CLOCK_OFFSET": p.detail,
            })  # fmt: skip
            await asyncio.sleep(p.duration)
            await asyncio.to_thread(skewed.stop, 30)
            self._log("clock", skewed.identity, start, f"{p.detail} s")
            await self._replace(skewed)
        elif p.kind == "group_down":  # one store group's primary stopped, then started
            assert c.second is not None
            await asyncio.to_thread(c.second.stop)
            try:
                await asyncio.sleep(p.duration)
            finally:
                await asyncio.to_thread(c.second.start)
            self._log("group_down", "postgres-second", start)
        elif p.kind == "move_shards":
            assert c.move is not None
            detail = await c.move()
            self._log("move_shards", "store", start, detail)
        elif p.kind == "partition":
            if c.partition is None:
                self.skipped.append(f"partition: {c.partition_skipped}")
                return
            identity = await c.partition(p.duration)
            self._log("partition", identity, start)

    async def _terminate_backends(self) -> None:
        conn = await asyncpg.connect(self.cluster.postgres.url, timeout=10)
        try:
            await conn.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = 'horae' AND pid <> pg_backend_pid() "
                "AND application_name <> 'chaos-observer'"
            )
        finally:
            await conn.close()

    async def _long_transaction(self, seconds: float) -> None:
        """A transaction with a snapshot and an xid, held open: vacuum cannot remove any
        row version dead since it began."""
        observer = {"application_name": "chaos-observer"}  # spared by pg_terminate
        conn = await asyncpg.connect(self.cluster.postgres.url, timeout=10,
                                     server_settings=observer)  # fmt: skip
        try:
            tx = conn.transaction(isolation="repeatable_read")
            await tx.start()
            await conn.fetchval("SELECT txid_current()")
            await conn.fetchval("SELECT count(*) FROM executions")
            await asyncio.sleep(seconds)
            await tx.rollback()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            pass  # a Postgres restart meanwhile ended it early
        finally:
            await conn.close()

    async def heal(self) -> None:
        """After the schedule: every replica running and not stopped."""
        await asyncio.gather(*self._background)
        await self.heal_processes()

    async def heal_processes(self) -> None:
        for replicas in self.cluster.replicas.values():
            for component in list(replicas):
                component.signal(signal.SIGCONT)
                if not component.alive():
                    await self._replace(component)

"""A run's store as the benchmark reads it: every store group of it. One pool per group;
counts summed and rows concatenated over the groups; and what each group's PostgreSQL
cluster did over a window (statements, WAL, CPU), per group, for the `Result`'s figures.

Each group is on a cluster of its own (bench.harness.scratch_store), so a cluster's WAL and
CPU are its group's (with `--one-cluster`, both groups' are the first group's figures);
pg_stat_statements is read on the cluster's base database (where hack/services.sh created
the extension), filtered by the group's scratch database.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import asyncpg

from bench.harness import Group
from bench.load import cluster_cpu
from horae.store.db import connect_pool

STATEMENTS = (
    "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s "
    "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1"
)
TOP_STATEMENTS = (
    "SELECT s.calls, s.total_exec_time, s.query FROM pg_stat_statements s "
    "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1 "
    "ORDER BY s.calls DESC LIMIT $2"
)


@dataclass(frozen=True)
class Usage:
    """Where each group's cluster stands: statements run so far in the group's database,
    its WAL position, its processes' CPU seconds so far."""

    statements: dict[str, int]
    wal_lsn: dict[str, str]
    cpu_seconds: dict[str, float]


@dataclass(frozen=True)
class Window:
    """What each group's cluster did between two `Usage`s."""

    statements: dict[str, int]
    wal_bytes: dict[str, float]
    cpu_seconds: dict[str, float]


@dataclass
class Stores:
    groups: list[Group]
    pools: dict[str, asyncpg.Pool]
    postmasters: dict[str, int]
    """Each group's cluster's postmaster pid (the parent of one of our backends): its
    processes are the cluster's, for the CPU figures."""

    @classmethod
    async def open(cls, groups: list[Group], size: int = 2) -> Stores:
        pools: dict[str, asyncpg.Pool] = {}
        try:
            for g in groups:
                pools[g.name] = await connect_pool(g.url, size=size)
            postmasters = {}
            for g in groups:
                backend = await pools[g.name].fetchval("SELECT pg_backend_pid()")
                postmasters[g.name] = parent_pid(backend)
        except BaseException:
            await asyncio.gather(*(p.close() for p in pools.values()))
            raise
        return cls(groups, pools, postmasters)

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self.pools.values()))

    @property
    def names(self) -> list[str]:
        return [g.name for g in self.groups]

    async def each(self, query: str, *args: object) -> dict[str, Any]:
        """fetchval in every group, concurrently: group -> value."""
        values = await asyncio.gather(*(self.pools[n].fetchval(query, *args) for n in self.names))
        return dict(zip(self.names, values, strict=True))

    async def sum(self, query: str, *args: object) -> int:
        return sum(int(v or 0) for v in (await self.each(query, *args)).values())

    async def concat(self, query: str, *args: object) -> list[asyncpg.Record]:
        rows = await asyncio.gather(*(self.pools[n].fetch(query, *args) for n in self.names))
        return [r for part in rows for r in part]

    async def statements(self) -> dict[str, int]:
        """Statements run in each group's database so far."""
        return {g.name: int(await on_base(g, STATEMENTS, g.database)) for g in self.groups}

    async def top_statements(self, limit: int = 12) -> dict[str, list[tuple[int, float, str]]]:
        """(calls, total ms, query) of the most-called statements, per group."""
        out = {}
        for g in self.groups:
            rows = await on_base(g, TOP_STATEMENTS, g.database, limit, many=True)
            out[g.name] = [(r["calls"], r["total_exec_time"], " ".join(r["query"].split())[:100])
                           for r in rows]  # fmt: skip
        return out

    async def usage(self) -> Usage:
        return Usage(
            await self.statements(),
            await self.each("SELECT pg_current_wal_lsn()::text"),
            cluster_cpu(self.postmasters),
        )

    async def since(self, before: Usage) -> Window:
        now = await self.usage()
        wal = {
            n: float(await self.pools[n].fetchval(
                "SELECT pg_wal_lsn_diff($1::text::pg_lsn, $2::text::pg_lsn)",
                now.wal_lsn[n], before.wal_lsn[n],
            ))
            for n in self.names
        }  # fmt: skip
        cpu = {n: round(now.cpu_seconds[n] - before.cpu_seconds[n], 2) for n in self.names}
        seen: set[str] = set()
        for g in self.groups:  # a cluster's WAL and CPU count once, for its first group
            if g.base_url in seen:
                wal[g.name], cpu[g.name] = 0.0, 0.0
            seen.add(g.base_url)
        return Window({n: now.statements[n] - before.statements[n] for n in self.names}, wal, cpu)


def figures(window: Window, executions: dict[str, int]) -> dict[str, dict[str, float]]:
    """Each group's figures over a window in which it ran `executions[group]` executions."""
    out = {}
    for n, done in executions.items():
        per = max(1, done)
        out[n] = {
            "executions": done,
            "statements_per_execution": round(window.statements[n] / per, 3),
            "wal_kib_per_execution": round(window.wal_bytes[n] / per / 1024, 2),
            "postgres_cpu_seconds": window.cpu_seconds[n],
        }
    return out


def summary(groups: dict[str, dict[str, float]]) -> str:
    """The per-group figures in a note's words."""
    return "; ".join(
        f"group {n}: {g['executions']:.0f} executions, {g['statements_per_execution']:.2f} "
        f"statements and {g['wal_kib_per_execution']:.1f} KiB WAL per execution, "
        f"PostgreSQL CPU {g['postgres_cpu_seconds']:.1f} s"
        for n, g in groups.items()
    )


async def on_base(g: Group, query: str, *args: object, many: bool = False) -> Any:
    conn = await asyncpg.connect(g.base_url)
    try:
        return await (conn.fetch(query, *args) if many else conn.fetchval(query, *args))
    finally:
        await conn.close()


def parent_pid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return int(stat[stat.rindex(")") + 2 :].split()[1])

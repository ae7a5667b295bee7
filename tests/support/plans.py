"""What a statement's plan reads from `executions`: which indexes, and which partitions it
scans whole (those with data; reading an empty partition costs nothing)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import asyncpg


@dataclass(frozen=True)
class Reads:
    plan: Any
    indexes: list[str]
    """Indexes of `executions` partitions the plan reads, by their parents' names."""
    seq_scanned: list[str]
    """`executions` partitions with data that the plan reads whole."""


def nodes(plan: Any) -> list[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan, depth first."""
    if isinstance(plan, dict):
        return [plan, *(n for v in plan.values() for n in nodes(v))]
    if isinstance(plan, list):
        return [n for item in plan for n in nodes(item)]
    return []


async def reads(pool: asyncpg.Pool, sql: str, *args: object) -> Reads:
    raw = await pool.fetchval("EXPLAIN (FORMAT JSON) " + sql, *args)
    plan = raw if isinstance(raw, list) else json.loads(raw)
    every = nodes(plan)
    indexes = [n["Index Name"] for n in every
               if str(n.get("Index Name", "")).startswith("executions")]  # fmt: skip
    scanned = [n["Relation Name"] for n in every if n.get("Node Type") == "Seq Scan"
               and str(n.get("Relation Name", "")).startswith("executions")]  # fmt: skip
    parents = dict(await pool.fetch(
        "SELECT inhrelid::regclass::text, inhparent::regclass::text FROM pg_inherits"
        " WHERE inhrelid::regclass::text = ANY($1::text[])", indexes,
    ))  # fmt: skip
    pages = dict(await pool.fetch(
        "SELECT relname, relpages FROM pg_class WHERE relname = ANY($1::text[])", scanned
    ))  # fmt: skip
    return Reads(plan, [parents.get(i, i) for i in indexes], [s for s in scanned if pages[s] > 0])


SCANS = """
SELECT c.relname, c.relkind::text, c.relpages, pg_stat_get_xact_numscans(c.oid) AS n,
       coalesce((SELECT p.relname FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
                 WHERE i.inhrelid = c.oid), c.relname) AS parent
FROM pg_class c WHERE c.relname LIKE 'executions%' AND c.relkind IN ('r', 'i')
"""


async def reads_inside(pool: asyncpg.Pool, sql: str, *args: object) -> Reads:
    """What a statement read from `executions`, counted rather than planned: for a call of
    a function (migration 004's worker functions), whose inner plans EXPLAIN does not
    show. The scans are the difference in the backend's statistics across the call (in a
    transaction that is rolled back)."""
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            before = {r["relname"]: r["n"] for r in await conn.fetch(SCANS)}
            await conn.fetch(sql, *args)
            rows = [r for r in await conn.fetch(SCANS) if r["n"] > before.get(r["relname"], 0)]
        finally:
            await tx.rollback()
    indexes = sorted({r["parent"] for r in rows if r["relkind"] == "i"})
    scanned = [r["relname"] for r in rows if r["relkind"] == "r" and r["relpages"] > 0]
    return Reads(None, indexes, scanned)

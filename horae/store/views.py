"""Reads for `kubectl get executions` (the aggregated API, horae/aggregated): a namespace's
executions past `scheduled` in due order, paged by position, from every store group, and
what changed in them since a moment (for a watch).

A namespace's executions live in the groups of its jobs' shards, and a moved shard's history
stays behind, so every read asks every group and merges: a page is what one database would
have answered. A row a move in flight holds in two groups is shown once, the copy in the
group that holds its shard now winning.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from horae.models import ExecutionStatus
from horae.store.queries import Q
from horae.store.routing import each_group
from horae.store.rows import ExecutionRow, execution_of

if TYPE_CHECKING:
    from horae.store.db import Conn
    from horae.store.groups import Store

EPOCH_ID = uuid.UUID(int=0)
FLOOR = datetime(1, 1, 2, tzinfo=UTC)
"""Before any row's due time: the position of a page from the start."""


@dataclass(frozen=True)
class Page:
    rows: list[ExecutionRow]
    """At most `limit` rows in (due_at, id) order."""
    more: bool
    """Rows may follow the last one."""


def _merge(store: Store, found: Iterable[tuple[str, Iterable[ExecutionRow]]]) -> list[ExecutionRow]:
    """Each execution once (the copy in its shard's group now wins), in (due_at, id) order."""
    chosen: dict[uuid.UUID, ExecutionRow] = {}
    for group, rows in found:
        for row in rows:
            if row.id not in chosen or group == store.catalog.group_of(row.shard):
                chosen[row.id] = row
    return sorted(chosen.values(), key=lambda r: (r.due_at, r.id))


def _statuses(
    statuses: Collection[ExecutionStatus] | None, *, terminal: bool = False
) -> list[str] | None:
    """The statuses asked for as the queries take them (None: any; with `terminal`, only
    the ended ones of them)."""
    if statuses is None:
        return None
    return sorted(s.value for s in statuses if s.terminal or not terminal)


def _rows(records: Iterable[object]) -> list[ExecutionRow]:
    return [execution_of(r) for r in records]  # type: ignore[arg-type]


Position = tuple[str, datetime, uuid.UUID]
"""Where a page stopped: after (namespace, due_at, id)."""


async def page(
    store: Store,
    tenant: str | None,
    *,
    jobs: Sequence[uuid.UUID] | None,
    statuses: Collection[ExecutionStatus] | None,
    after: Position | None,
    limit: int,
) -> Page:
    """Up to `limit` executions past `scheduled` of the namespace (None: of every one, in
    namespace order) and of `jobs` (None: of any job), after `after`, in due order."""
    low: Position = after or ("", FLOOR, EPOCH_ID)
    if tenant is not None and low[0] != tenant:
        low = (tenant, FLOOR, EPOCH_ID)
    live_wanted = statuses is None or any(not s.terminal for s in statuses)
    ended = _statuses(statuses, terminal=True)

    def key(row: ExecutionRow) -> Position:
        return (row.tenant, row.due_at, row.id)

    async def one(conn: Conn) -> tuple[list[ExecutionRow], bool]:
        if jobs is not None:
            records = await conn.fetch(
                Q["view_jobs_page"], list(jobs), *low, limit + 1, _statuses(statuses)
            )
            rows = _rows(records)
            return rows[:limit], len(rows) > limit
        rows = []
        if ended != []:
            if tenant is None:
                records = await conn.fetch(Q["view_all_ended_page"], *low, limit + 1, ended)
            else:
                records = await conn.fetch(
                    Q["view_ended_page"], tenant, low[1], low[2], limit + 1, ended
                )
            rows = _rows(records)
        live: list[ExecutionRow] = []
        if live_wanted:
            records = await (
                conn.fetch(Q["view_all_live"])
                if tenant is None
                else conn.fetch(Q["view_live"], tenant, None)
            )
            live = [
                r
                for r in _rows(records)
                if key(r) > low and (statuses is None or r.status in statuses)
            ]
        return rows[:limit] + live, len(rows) > limit

    answers = await each_group(store, one)
    merged = sorted(_merge(store, ((g, rows) for g, (rows, _) in answers)), key=key)
    more = len(merged) > limit or any(full for _, (_, full) in answers)
    return Page(rows=merged[:limit], more=more)


async def by_id_range(
    store: Store, tenant: str, low: uuid.UUID, high: uuid.UUID
) -> list[ExecutionRow]:
    """The namespace's executions past `scheduled` with ids from `low` to `high`."""
    answers = await each_group(store, lambda c: c.fetch(Q["view_by_id_range"], tenant, low, high))
    return _merge(store, ((g, _rows(r)) for g, r in answers))


async def by_ids(store: Store, tenant: str, ids: Sequence[uuid.UUID]) -> list[ExecutionRow]:
    answers = await each_group(store, lambda c: c.fetch(Q["view_by_ids"], tenant, list(ids)))
    return _merge(store, ((g, _rows(r)) for g, r in answers))


async def live(store: Store, tenant: str, jobs: Sequence[uuid.UUID] | None) -> list[ExecutionRow]:
    """The namespace's queued and running executions (of `jobs`; None: of any job)."""
    answers = await each_group(
        store, lambda c: c.fetch(Q["view_live"], tenant, None if jobs is None else list(jobs))
    )
    return _merge(store, ((g, _rows(r)) for g, r in answers))


async def ended_since(
    store: Store,
    tenant: str,
    jobs: Sequence[uuid.UUID] | None,
    *,
    due_from: datetime,
    ended_after: datetime,
) -> list[ExecutionRow]:
    """The namespace's executions (of `jobs`) due from `due_from` that ended after
    `ended_after`."""

    async def one(conn: Conn) -> list[object]:
        if jobs is None:
            return list(await conn.fetch(Q["view_ended_since"], tenant, due_from, ended_after))
        return list(
            await conn.fetch(Q["view_jobs_ended_since"], tenant, list(jobs), due_from, ended_after)
        )

    answers = await each_group(store, one)
    return _merge(store, ((g, _rows(r)) for g, r in answers))


async def jobs_named(store: Store, tenant: str | None, names: Collection[str]) -> list[uuid.UUID]:
    """The ids of the namespace's (None: any namespace's) jobs named any of `names`, in any
    state."""

    async def one(conn: Conn) -> list[Any]:
        if tenant is None:
            return list(await conn.fetch(Q["view_all_jobs_named"], sorted(names)))
        return list(await conn.fetch(Q["view_jobs_named"], tenant, sorted(names)))

    answers = await each_group(store, one)
    return sorted({r["id"] for _, records in answers for r in records})


async def job_names(store: Store, ids: Collection[uuid.UUID]) -> dict[uuid.UUID, str | None]:
    """Each of `ids`' job name (None for an unnamed API job); ids of no job are left out."""
    answers = await each_group(store, lambda c: c.fetch(Q["view_job_names"], sorted(ids)))
    return {r["id"]: r["name"] for _, records in answers for r in records}


async def clock(store: Store) -> datetime:
    """The store's clock (the main group's)."""
    async with store.home.acquire() as conn:
        value: datetime = await conn.fetchval(Q["view_clock"])
    return value

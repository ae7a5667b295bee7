"""What falls due soon, for the operator's WorkerPool autoscaler: pending executions per
tenant in bins of due time (`due_ahead`). One read per store group per slice of due time;
each pending row is read about once, as the autoscaler reads each slice once
(`horae.operator.workerpool.ahead`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from horae.store.boundary import translated
from horae.store.queries import Q

if TYPE_CHECKING:
    from horae.store.db import Conn

BIN = timedelta(seconds=10)
"""The width of a bin of due time (aligned on the clock: a bin starts at :00, :10, ...)."""


@dataclass(frozen=True, slots=True)
class DueCount:
    """`count` pending executions of `tenant` due in one bin, from `first_due` to `last_due`."""

    tenant: str
    first_due: datetime
    last_due: datetime
    count: int


@translated
async def due_ahead(
    conn: Conn, *, since: datetime, until: datetime, shards: Sequence[int]
) -> list[DueCount]:
    """The pending (`scheduled`) executions of `shards` due in [since, until), per tenant
    and bin."""
    rows = await conn.fetch(Q["due_ahead"], since, until, list(shards), BIN)
    return [DueCount(r["tenant"], r["first_due"], r["last_due"], r["due"]) for r in rows]

"""One-execution forms of the store's batch transitions, for tests that move a single
execution along (the components always go through the batches)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from horae.models import ExecutionStatus
from horae.store.dispatch import Due, ShardDispatch, record_dispatch
from horae.store.executions import Answer, Claimed, ClaimRequest, Finish, claim_many, finish_many

if TYPE_CHECKING:
    from horae.store.db import Conn


async def record_published(
    conn: Conn, shard: int, epoch: int, batch: Sequence[Due], now: datetime
) -> int | None:
    """`record_dispatch` for one shard's published `batch`: how many were recorded, None
    when fenced out. (The rows stay `scheduled`; next occurrences are scheduled.)"""
    published, fenced = await record_dispatch(conn, {shard: ShardDispatch(epoch, batch)}, now)
    return None if fenced else published


async def claim(
    conn: Conn,
    execution_id: uuid.UUID,
    due_at: datetime,
    *,
    owner: str,
    now: datetime,
    lease: timedelta,
    tenant: str,
) -> Answer:
    """`claim_many` for one execution of `tenant`, by a worker serving that tenant."""
    [answer] = await claim_many(
        conn,
        [ClaimRequest(execution_id, due_at, tenant)],
        owner=owner,
        now=now,
        lease=lease,
        serves={tenant},
    )
    return answer


async def finish(
    conn: Conn,
    claimed: Claimed,
    *,
    owner: str,
    status: ExecutionStatus,
    now: datetime,
    error_kind: str | None = None,
    error_message: str | None = None,
    result: Any = None,
    retry_at: datetime | None = None,
) -> bool:
    """`finish_many` for one execution."""
    outcome = Finish(claimed, status, error_kind, error_message, result, retry_at)
    [recorded] = await finish_many(conn, [outcome], owner=owner, now=now)
    return recorded

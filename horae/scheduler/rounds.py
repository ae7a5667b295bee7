"""What a dispatch round does with each due execution of a shard, before it is published:
judge an overdue occurrence of a cron job by its catch-up policy (run it, or skip it and
the rest of its gap), skip one past its starting deadline, and judge a first attempt of a
Forbid or Replace job by what of its job still runs (skip it, or cancel its predecessors)."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from horae.domain.limits import CATCH_UP_GRACE
from horae.models import ExecutionMessage
from horae.scheduler.limits import late
from horae.store import dispatch as store
from horae.store import occurrences
from horae.store.dispatch import CATCH_UP_KIND, Due, Skip
from horae.store.rows import LiveExecution

if TYPE_CHECKING:
    from horae.store.db import Conn

Plan = tuple[list[Due], list[Skip], list[tuple[uuid.UUID, datetime]]]
"""A shard's part of a batch, as `decide` splits it: publish, skip, and the predecessors to
cancel."""


def guarded(d: Due) -> bool:
    """A first attempt of a Forbid or Replace job: whether it runs (or replaces its
    predecessor) depends on what still runs at its due moment, so it is decided then."""
    return d.concurrency_policy != "Allow" and d.attempt == 1


def message(d: Due) -> ExecutionMessage:
    return ExecutionMessage(
        execution_id=d.id,
        job_id=d.job_id,
        task=d.task,
        tenant=d.tenant,
        due_at=d.due_at,
        occurrence_at=d.occurrence_at,
        attempt=d.attempt,
    )


def overdue(d: Due, now: datetime) -> bool:
    """A scheduled first attempt more than `CATCH_UP_GRACE` late: the scheduler was away (an
    outage, a long failover), so it may be the first of a gap that catch-up judges. Manual
    occurrences, backfilled ones and retries are outside the schedule, and always run."""
    return (
        d.attempt == 1 and not d.manual and d.backfill is None and now - d.due_at > CATCH_UP_GRACE
    )


async def catch_up(conn: Conn, dues: list[Due], now: datetime) -> tuple[list[Due], list[Skip]]:
    """Split `dues` into those that run and the overdue ones catch-up skips, each with its gap
    (`occurrences.catch_up`). On time, the common case, this costs nothing; overdue, one
    query reads the specs of their jobs (active cron jobs only: a one-off runs late)."""
    late = [d for d in dues if overdue(d, now)]
    if not late:
        return dues, []
    specs = await store.recurring_specs(conn, [d.job_id for d in late])
    skips: list[Skip] = []
    for d in late:
        spec = specs.get(d.job_id)
        if spec is None:
            continue
        # A few milliseconds each (a gap's newest 100-odd occurrences): after an outage of
        # many jobs, let the lease renewals in between.
        await asyncio.sleep(0)
        gap = occurrences.catch_up(
            d.job_id, spec, after=d.occurrence_at - timedelta(microseconds=1), now=now
        )
        if gap.first is not None:
            skips.append(Skip(d, CATCH_UP_KIND, gap.first.message, gap))
    skipped = {s.due.id for s in skips}
    return [d for d in dues if d.id not in skipped], skips


async def decide(conn: Conn, dues: list[Due], now: datetime) -> Plan:
    """Split a shard's batch into (publish, skip, cancel predecessors)."""
    dues, skips = await catch_up(conn, dues, now)
    keep: list[Due] = []
    for d in dues:
        if late(d, now):
            behind = (now - d.due_at).total_seconds()
            why = (
                f"not started within startingDeadlineSeconds={d.starting_deadline_seconds} "
                f"({behind:.1f}s late)"
            )
            skips.append(Skip(d, "deadline", why))
        else:
            keep.append(d)
    judged = [d for d in keep if guarded(d)]
    cancel: list[tuple[uuid.UUID, datetime]] = []
    if judged:
        live = await store.live_of_jobs(conn, [d.job_id for d in judged])
        by_job: dict[uuid.UUID, list[LiveExecution]] = defaultdict(list)
        for row in live:
            by_job[row.job_id].append(row)
        for d in judged:
            running = [r for r in by_job.get(d.job_id, []) if r.id != d.id]
            if not running:
                continue
            if d.concurrency_policy == "Forbid":
                keep.remove(d)
                skips.append(
                    Skip(
                        d,
                        "forbid",
                        "concurrencyPolicy=Forbid: the previous occurrence is still running",
                    )
                )
            else:
                cancel += [(r.id, r.due_at) for r in running]
    return keep, skips, cancel

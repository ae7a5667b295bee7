"""What a dispatch round does with each due execution of a shard, before it is published:
judge an overdue occurrence of a cron job by its catch-up policy (run it, or skip it and
the rest of its gap), skip one past its starting deadline, and judge a first attempt of a
Forbid, Replace or BufferOne job by what else of its job is live at its due moment
(`judge`):

- Forbid: skipped (`forbid`) while an earlier one is published (not yet claimed) or running.
- Replace: published; every earlier one still live is ended (`ShardDispatch.cancel`: one
  not started is cancelled, a running one's worker is told to stop it now).
- BufferOne: published when nothing of its job is live or waiting; else held (left
  `scheduled`, looked at again every `HOLD_EVERY`) while one runs, unless an earlier one
  already waits, when it is skipped (`buffer_one`). A held one is late for its job's
  overlap, not for an outage: catch-up leaves it alone.

Executions of one job due in one round are judged in occurrence order, each seeing what the
earlier ones became (a catch-up releasing several at once runs one under Forbid).
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Collection, Container, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from horae.domain.limits import CATCH_UP_GRACE
from horae.models import ConcurrencyPolicy, ExecutionMessage
from horae.scheduler.limits import late
from horae.store import dispatch as store
from horae.store import occurrences
from horae.store.dispatch import CATCH_UP_KIND, Due, Skip
from horae.store.rows import LiveExecution

if TYPE_CHECKING:
    from horae.store.db import Conn

HOLD_EVERY = timedelta(milliseconds=500)
"""How often a BufferOne occurrence held behind a running one is looked at again: it starts
at most this long after the running one ended."""

FORBID = "concurrencyPolicy=Forbid: the previous occurrence is still running"
BUFFER_ONE = "concurrencyPolicy=BufferOne: one run already waits behind the running one"


@dataclass
class Plan:
    """A shard's part of a batch, as `decide` splits it."""

    publish: list[Due] = field(default_factory=list)
    skip: list[Skip] = field(default_factory=list)
    cancel: list[tuple[uuid.UUID, datetime]] = field(default_factory=list)
    """(id, due_at) of the executions Replace occurrences replace."""
    held: list[Due] = field(default_factory=list)
    """BufferOne occurrences to leave `scheduled` and look at again (`HOLD_EVERY`)."""


def guarded(d: Due) -> bool:
    """A first attempt of a job with an overlap policy other than Allow: whether it runs
    (or replaces its predecessor, or waits) depends on what still runs at its due moment, so
    it is decided then."""
    return d.concurrency_policy != ConcurrencyPolicy.ALLOW and d.attempt == 1


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


async def decide(
    conn: Conn,
    dues: list[Due],
    now: datetime,
    *,
    waiting: Collection[tuple[uuid.UUID, datetime]] = (),
    published: Container[tuple[uuid.UUID, datetime]] = (),
) -> Plan:
    """Split a shard's batch: publish, skip, cancel predecessors, hold. Catch-up judges the
    overdue ones first, but those `waiting` ((id, due_at)) behind a running one (BufferOne).
    What the caller `published` ((id, due_at)) and no worker has claimed yet counts as
    queued: live, as if it ran."""
    exempt = [d for d in dues if (d.id, d.due_at) in waiting]
    run, skips = await catch_up(conn, [d for d in dues if (d.id, d.due_at) not in waiting], now)
    plan = Plan(skip=skips)
    on_time: list[Due] = []
    dues = [*exempt, *run]
    for d in dues:
        if late(d, now):
            behind = (now - d.due_at).total_seconds()
            why = (
                f"not started within startingDeadlineSeconds={d.starting_deadline_seconds} "
                f"({behind:.1f}s late)"
            )
            plan.skip.append(Skip(d, "deadline", why))
        else:
            on_time.append(d)
    judged = [d for d in on_time if guarded(d)]
    others: list[LiveExecution] = []
    if judged:
        buffered = [d for d in judged if d.concurrency_policy == ConcurrencyPolicy.BUFFER_ONE]
        others = await store.live_of_jobs(
            conn,
            sorted({d.job_id for d in judged}),
            published=published,
            waiting={d.job_id for d in buffered},
            now=now,
        )
    judge(plan, on_time, others)
    return plan


def judge(plan: Plan, dues: Sequence[Due], others: Sequence[LiveExecution]) -> None:
    """Add `dues` (none late) to `plan`, given `others`: the jobs' queued and running
    executions and, for BufferOne jobs, their first attempts still scheduled and due (this
    round's among them, unless something else has dispatched or ended them)."""
    plan.publish += [d for d in dues if not guarded(d)]
    in_round = {d.id for d in dues}
    scheduled = {r.id for r in others if r.status == "scheduled"}
    live: dict[uuid.UUID, list[tuple[uuid.UUID, datetime]]] = defaultdict(list)
    waiting: dict[uuid.UUID, list[tuple[datetime, uuid.UUID]]] = defaultdict(list)
    for r in others:
        if r.id in in_round:
            continue
        if r.status == "scheduled":
            waiting[r.job_id].append((r.occurrence_at, r.id))
        else:
            live[r.job_id].append((r.id, r.due_at))
    by_job: dict[uuid.UUID, list[Due]] = defaultdict(list)
    for d in dues:
        if guarded(d):
            by_job[d.job_id].append(d)
    for job_id, mine in by_job.items():
        running = live[job_id]
        held: list[Due] = []
        for d in sorted(mine, key=lambda d: (d.occurrence_at, d.id)):
            if d.concurrency_policy == ConcurrencyPolicy.FORBID:
                if running:
                    plan.skip.append(Skip(d, "forbid", FORBID))
                else:
                    plan.publish.append(d)
                    running.append((d.id, d.due_at))
            elif d.concurrency_policy == ConcurrencyPolicy.REPLACE:
                for replaced in running:
                    if replaced[0] in in_round:  # an earlier one of this round: not published
                        plan.publish = [p for p in plan.publish if p.id != replaced[0]]
                    plan.cancel.append(replaced)
                plan.publish.append(d)
                running[:] = [(d.id, d.due_at)]
            elif d.id not in scheduled:
                pass  # BufferOne, ended or dispatched meanwhile (paused, edited): let go
            else:
                ahead = (d.occurrence_at, d.id)
                earlier = bool(held) or any(w < ahead for w in waiting[job_id])
                if running and earlier:
                    plan.skip.append(Skip(d, "buffer_one", BUFFER_ONE))
                elif running or earlier:
                    held.append(d)
                else:
                    plan.publish.append(d)
                    running.append((d.id, d.due_at))
        plan.held += held

"""What a dispatch round does with each due execution of a shard, before it is published:
skip one past its starting deadline, and judge a first attempt of a Forbid, Replace or
BufferOne job by what else of its job is live at its due moment (`judge`):

- Forbid: skipped (`forbid`) while an earlier one is queued or running.
- Replace: published; every earlier one still live is ended (`ShardDispatch.cancel`: one
  not started is cancelled, a running one's worker is told to stop it now).
- BufferOne: published when nothing of its job is live or waiting; else held (left
  `scheduled`, looked at again every `HOLD_EVERY`) while one runs, unless an earlier one
  already waits, when it is skipped (`buffer_one`).

Executions of one job due in one round are judged in occurrence order, each seeing what the
earlier ones became (a catch-up releasing several at once runs one under Forbid).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from horae.models import ConcurrencyPolicy, ExecutionMessage
from horae.scheduler.limits import late
from horae.store import dispatch as store
from horae.store.dispatch import Due, Skip
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


async def decide(conn: Conn, dues: list[Due], now: datetime) -> Plan:
    """Split a shard's batch: publish, skip, cancel predecessors, hold."""
    plan = Plan()
    on_time: list[Due] = []
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
            waiting=sorted({d.job_id for d in buffered}),
            shards=sorted({d.shard for d in buffered}),
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

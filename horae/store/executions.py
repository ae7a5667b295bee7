"""The worker's execution transitions: claim a batch (within its tenants' limits, only
executions of tenants it serves), record outcomes, extend leases (heartbeat) and hand
unfinished executions back. Each is a single statement through a `SECURITY DEFINER`
function of migration 004, the only way a worker's database role reaches a row.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import asyncpg

from horae.models import ExecutionStatus
from horae.store.boundary import translated
from horae.store.occurrences import next_occurrence
from horae.store.queries import Q
from horae.store.rows import retry_policy_of, spec_of_record
from horae.store.scheduling import NOTIFY_WITHIN, new_execution_id

if TYPE_CHECKING:
    from horae.store.db import Conn


@dataclass(frozen=True, slots=True)
class Claimed:
    """A claimed execution with what its handler needs."""

    id: uuid.UUID
    job_id: uuid.UUID
    tenant: str
    task: str
    shard: int
    due_at: datetime
    occurrence_at: datetime
    attempt: int
    job_version: int
    payload: dict[str, Any]
    timeout_seconds: int | None
    retry_policy: dict[str, Any]
    run_at: datetime | None
    source: str
    name: str | None
    lease_until: datetime
    """When the claim's lease ends: its clock (`claim_many`'s `now`) or the due time,
    whichever is later, plus the lease, as `horae_claim` sets it."""


@dataclass(frozen=True)
class Throttled:
    """The tenant had no free slot: the execution is due again at `due_at`."""

    due_at: datetime


@dataclass(frozen=True)
class Early:
    """Not claimed ahead of its due time: its tenant has a `max_running` limit, which counts
    running rows, so it is claimed once due. The row is left as it was."""


EARLY = Early()


@dataclass(frozen=True)
class Refused:
    """Not this worker's to run: the row's tenant is not one it serves, or the message named
    another tenant than the row's. The row is left as it was."""

    tenant: str
    """The row's tenant."""
    reason: str


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """A dispatched execution a worker wants to run, and the tenant its message named."""

    id: uuid.UUID
    due_at: datetime
    tenant: str


Answer = Claimed | Throttled | Refused | Early | None


def _refusal(request: ClaimRequest, tenant: str, serves: Collection[str]) -> Refused:
    """Why `horae_claim` refused `request`, whose row belongs to `tenant`."""
    if tenant not in serves:
        why = f"execution {request.id} is of tenant {tenant!r}: this worker does not serve it"
    else:
        why = (
            f"the message names tenant {request.tenant!r} for execution {request.id}"
            f" of tenant {tenant!r}"
        )
    return Refused(tenant, why)


@translated
async def claim_many(
    conn: Conn,
    requests: Sequence[ClaimRequest],
    *,
    owner: str,
    now: datetime,
    lease: timedelta,
    serves: Collection[str],
    throttle_delay: timedelta = timedelta(seconds=1),
) -> list[Answer]:
    """Claim for `owner`, within tenants' limits, in one transaction; one answer per request.

    None for a duplicate or a stale execution (a stale one is cancelled);
    `Refused` when the row's tenant is not among `serves` (the tenants the worker runs
    executions of) or is not the tenant the message named: the row is left untouched;
    `Throttled` when the row's tenant already runs its `max_running` executions (the
    execution goes back to `scheduled` 1-1.5 `throttle_delay` later, without using an
    attempt). An execution not yet due at `now` is claimed ahead: its lease runs from its
    due time and it has no start time until its outcome is recorded (`Finish.started_at`);
    `Early` for one of a tenant with a limit (left alone: claim it once due). Tenants and
    limits are the rows' own, so a message naming another tenant can neither reach a
    handler nor escape its tenant's limit. Limits are counted from the running rows
    themselves, so a killed worker leaks no slot: its executions stop counting when the
    reaper ends them. The claim itself is `horae_claim` (migration 004),
    the only way a worker's database role reaches a row.
    """
    answers: dict[uuid.UUID, Answer] = {}
    async with conn.transaction():
        rows = await conn.fetch(
            Q["claim"],
            [r.id for r in requests],
            [r.due_at for r in requests],
            [r.tenant for r in requests],
            sorted(serves),
            owner,
            now,
            lease,
            throttle_delay,
        )
        asked = {r.id: r for r in requests}
        for row in rows:
            if row["outcome"] == "refused":
                answers[row["id"]] = _refusal(asked[row["id"]], row["tenant"], serves)
            elif row["outcome"] == "throttled":
                answers[row["id"]] = Throttled(row["due_at"])
            elif row["outcome"] == "early":
                answers[row["id"]] = EARLY
            else:
                answers[row["id"]] = Claimed(
                    **{f: row[f] for f in _CLAIMED_COLUMNS},
                    retry_policy=retry_policy_of(row["retry_policy"]),
                    lease_until=max(now, row["due_at"]) + lease,
                )
        # Claimed before the scheduler recorded its dispatch, which may never happen (it
        # crashed, or its transaction failed): the next occurrence is scheduled here, or a
        # cron job whose record is lost would never fire again. Idempotent.
        await _schedule_claimed_next(
            conn,
            [r for r in rows if r["unrecorded"] and r["cron"] is not None],
            owner=owner,
            now=now,
        )
    # The same execution twice in one batch (a redelivered duplicate): only the first runs.
    given: set[uuid.UUID] = set()
    results: list[Answer] = []
    for r in requests:
        results.append(None if r.id in given else answers.get(r.id))
        given.add(r.id)
    return results


_CLAIMED_COLUMNS = tuple(
    f for f in Claimed.__dataclass_fields__ if f not in ("lease_until", "retry_policy")
)


async def _schedule_claimed_next(
    conn: Conn, rows: Sequence[asyncpg.Record], *, owner: str, now: datetime
) -> None:
    """The next occurrence of each cron job among claimed first attempts (`rows`, as
    `horae_claim` answers them, the job's schedule included): computed here, inserted by
    `horae_schedule_next` for the executions `owner` holds."""
    latest: dict[uuid.UUID, asyncpg.Record] = {}
    for row in sorted((r for r in rows if r["attempt"] == 1), key=lambda r: r["occurrence_at"]):
        latest[row["job_id"]] = row  # per job, its latest occurrence
    planned = []
    for row in latest.values():
        nxt = next_occurrence(row["job_id"], spec_of_record(row), row["occurrence_at"])
        if nxt is not None:
            planned.append((row, nxt))
    if planned:
        await conn.execute(
            Q["schedule_claimed_next"],
            owner,
            [r["id"] for r, _ in planned],
            [r["due_at"] for r, _ in planned],
            [new_execution_id() for _ in planned],
            [n.due_at for _, n in planned],
            [n.occurrence_at for _, n in planned],
            now,
            now + NOTIFY_WITHIN,
        )


@dataclass(frozen=True, slots=True)
class Finish:
    """A claimed execution's terminal outcome, and its retry (if any) at `retry_at`."""

    claimed: Claimed
    status: ExecutionStatus
    error_kind: str | None = None
    error_message: str | None = None
    result: Any = None
    retry_at: datetime | None = None
    started_at: datetime | None = None
    """When its handler began (by Postgres's clock); None keeps the claim's stamp."""


@translated
async def finish_many(
    conn: Conn, outcomes: Sequence[Finish], *, owner: str, now: datetime
) -> list[bool]:
    """Record terminal outcomes (and retry executions, and the jobs' latest runs: their
    consecutive failures, and a pause by their failure policy) in one call of
    `horae_finish` (migration 004, as 017 left it: with when each handler began). An answer
    is False when `owner` no longer held that execution (its lease was lost): nothing is
    recorded for it."""
    rows = await conn.fetch(
        Q["finish"],
        [f.claimed.id for f in outcomes],
        [f.claimed.due_at for f in outcomes],
        [f.status.value for f in outcomes],
        [f.error_kind for f in outcomes],
        [f.error_message for f in outcomes],
        [f.result for f in outcomes],
        [f.retry_at for f in outcomes],
        [new_execution_id() if f.retry_at is not None else None for f in outcomes],
        owner,
        now,
        now + NOTIFY_WITHIN,
        [f.started_at for f in outcomes],
    )
    recorded = {row["id"] for row in rows}
    return [f.claimed.id in recorded for f in outcomes]


@dataclass(frozen=True)
class Beat:
    """What a heartbeat did: the leases it extended, and which of those executions are
    marked for cancellation (job cancelled, or replaced under `Replace`)."""

    extended: frozenset[uuid.UUID]
    cancel: list[uuid.UUID]


@translated
async def heartbeat(
    conn: Conn, *, owner: str, now: datetime, lease: timedelta, ids: Sequence[uuid.UUID]
) -> Beat:
    """Extend the leases of `owner`'s running executions among `ids` (those it still works
    on) in one statement. One not extended was ended, lost its lease, is locked by another
    writer (left for the next heartbeat), or moved to another store group."""
    rows = await conn.fetch(Q["heartbeat"], owner, now, lease, list(ids))
    return Beat(frozenset(r["id"] for r in rows), [r["id"] for r in rows if r["cancel_requested"]])


@translated
async def release_running(
    conn: Conn, *, owner: str, ids: Sequence[uuid.UUID], now: datetime
) -> int:
    """Put `owner`'s unfinished executions back to `scheduled`, due now, and tell their
    shards' schedulers. Returns how many."""
    released: int = await conn.fetchval(Q["release_running"], owner, list(ids), now)
    return released


@dataclass(frozen=True, slots=True)
class Promise:
    """A worker's promise in one store group (`promise`)."""

    alive_until: datetime
    """It starts every execution it claimed ahead due up to this."""
    written_at: datetime
    """When, by Postgres's clock: one due at `d` is covered when `d <= alive_until` and
    `written_at < d + grace` (a return of it would have come later)."""
    mine: frozenset[uuid.UUID]
    """Of the claims ahead asked about, those it still holds (none can be given back now)."""


@translated
async def promise(
    conn: Conn,
    *,
    owner: str,
    ahead: timedelta,
    grace: timedelta,
    claims: Sequence[tuple[uuid.UUID, datetime]] = (),
) -> Promise:
    """Promise to start every execution `owner` claimed ahead and due up to `ahead` from
    now, by Postgres's clock; the reaper gives back one its promises did not cover within
    `grace` of its due time. Of `claims` ((id, due time) claimed ahead), which `owner`
    still holds."""
    row = await conn.fetchrow(
        Q["promise"], owner, ahead, grace, [c[0] for c in claims], [c[1] for c in claims]
    )
    assert row is not None
    return Promise(row["alive_until"], row["written_at"], frozenset(row["mine"]))


@translated
async def forget_claims_ahead(conn: Conn, owner: str) -> int:
    """What `owner` still holds claimed ahead and unrecorded, back to `scheduled` (called by
    a worker starting up: no process of its identity can start those now). How many."""
    forgot: int = await conn.fetchval(Q["forget_claims_ahead"], owner)
    return forgot


@translated
async def await_catalog(conn: Conn) -> None:
    """Wait for a change of the store's catalog in progress to commit (`conn`: the catalog's
    database). Moving shards deletes their rows in the source group before the catalog
    commits: a write that waited for the move's locks and found its rows gone must read the
    catalog only after this, or it would still see the shards where they were."""
    await conn.execute(Q["await_catalog"])

"""`horae explain` on a real store: the shard owners and job changes migration 013 records
(by triggers, whoever writes), read back through the store's real writes (a take, a dispatch
record, pause, resume, edit), as the API's role reads them; and their pruning with the
executions' retention, as the scheduler's role runs it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
import pytest_asyncio

from horae.errors import NotFound
from horae.models import JobSource, JobSpec
from horae.store import dispatch, jobs
from horae.store.db import connect
from horae.store.dispatch import Due, ShardDispatch
from horae.store.executions import Claimed
from horae.store.explain import explain_occurrence
from horae.store.groups import Store
from horae.store.migrate import maintain_partitions
from tests.support import transitions
from tests.support.store_rows import StoreRows

S = timedelta(seconds=1)
MINUTE = 60 * S


@pytest_asyncio.fixture
async def as_api(role_urls: dict[str, str]) -> AsyncIterator[Store]:
    """The store as the API's role sees it (explain reads only what that role may)."""
    store = await Store.open(role_urls["api"], size=2)
    yield store
    await store.close()


async def first_row(stored: StoreRows, job_id: uuid.UUID) -> asyncpg.Record:
    row = await stored.fetchrow(
        "SELECT * FROM executions WHERE job_id = $1 ORDER BY due_at LIMIT 1", job_id
    )
    assert row is not None
    return row


async def test_a_dispatch_after_a_takeover_names_both_owners_and_the_lateness(
    stored: StoreRows, as_api: Store
) -> None:
    start = datetime.now(UTC).replace(microsecond=0) - 5 * MINUTE
    spec = JobSpec(task="t", cron="*/10 * * * * *")
    job_id = await stored.create_job(spec, tenant="acme", source=JobSource.API, now=start)
    first = await first_row(stored, job_id)
    due, shard = first["due_at"], first["shard"]
    async with stored.on_job(job_id) as conn:
        old = await dispatch.take_shard(conn, shard, "scheduler-a", start - MINUTE)
        # scheduler-a died before the occurrence; scheduler-b took the shard 3 s after it.
        new = await dispatch.take_shard(conn, shard, "scheduler-b", due + 3 * S)
        pending = Due(**{k: first[k] for k in Due.__dataclass_fields__})
        published, fenced = await dispatch.record_dispatch(
            conn, {shard: ShardDispatch(new, published=[pending])}, due + 3.2 * S
        )
        assert (published, fenced) == (1, set())
        # A worker claims it at once (the published row stays scheduled until then).
        claimed = await transitions.claim(
            conn,
            pending.id,
            pending.due_at,
            owner="w1",
            now=due + 3.2 * S,
            lease=MINUTE,
            tenant="acme",
        )
        assert isinstance(claimed, Claimed)

    found = await explain_occurrence(as_api, job_id, tenant="acme", at=due, now=due + MINUTE)
    assert (found.outcome, found.reason) == ("in_progress", "shard_owner_changed")
    assert found.verdict.startswith(
        f"started 3.2 s late: shard {shard} changed owner at "
        f"{(due + 3 * S).strftime('%Y-%m-%d %H:%M:%S')}.000Z (replica scheduler-a → scheduler-b)"
    )
    change = found.owner_change
    assert change is not None and (change.from_epoch, change.to_epoch) == (old, new)
    assert found.attempts[0].dispatched_by == "scheduler-b"
    assert [s.what for s in found.steps] == ["due", "shard taken", "claimed"]
    # The next occurrence the dispatch scheduled: not due yet, on the shard scheduler-b holds.
    ahead = await explain_occurrence(
        as_api, job_id, tenant="acme", at=due + 10 * S, now=due + 5 * S
    )
    assert ahead.outcome == "not_due_yet"
    assert f"owned by scheduler-b (epoch {new}" in ahead.verdict
    with pytest.raises(NotFound):  # another tenant's job
        await explain_occurrence(as_api, job_id, tenant="other", at=due, now=due)


async def test_pauses_resumes_and_edits_are_recorded_and_explain_missing_occurrences(
    stored: StoreRows, as_api: Store
) -> None:
    start = datetime.now(UTC).replace(second=0, microsecond=0) - 30 * MINUTE
    start -= (start.minute % 2) * MINUTE  # an even minute: start + 89 min is no fire time of */2
    spec = JobSpec(task="t", cron="* * * * *")
    job_id = await stored.create_job(spec, tenant="acme", source=JobSource.API, now=start)
    edited = spec.model_copy(update={"cron": "*/2 * * * *"})
    # As the API's role changes jobs: the trigger records them whoever writes.
    async with as_api.for_job(job_id).acquire() as conn:
        await jobs.pause_job(conn, job_id, now=start + 5 * MINUTE + 30 * S)
        await jobs.resume_job(conn, job_id, now=start + 20 * MINUTE + 30 * S)
        await jobs.pause_job(conn, job_id, now=start + 25 * MINUTE + 30 * S)
        await jobs.edit_job(conn, job_id, edited, now=start + 28 * MINUTE + 30 * S)
    events = await stored.fetch(
        "SELECT kind, state::text, prior_state::text, prior_cron FROM job_events"
        " WHERE job_id = $1 ORDER BY at",
        job_id,
    )
    assert [tuple(e) for e in events] == [
        ("paused", "paused", "active", None),
        ("resumed", "active", "paused", None),
        ("paused", "paused", "active", None),
        ("edited", "paused", "paused", "* * * * *"),
    ]

    async def explained(at: datetime) -> tuple[str, str | None, str]:
        found = await explain_occurrence(
            as_api, job_id, tenant="acme", at=at, now=start + 29 * MINUTE
        )
        return found.outcome, found.reason, found.verdict

    # Missed while paused, recorded when it resumed.
    assert (await explained(start + 10 * MINUTE))[:2] == ("skipped", "paused")
    # Paused again: no row, and the pause says since when.
    outcome, reason, verdict = await explained(start + 27 * MINUTE)
    assert (outcome, reason) == ("no_row", "paused")
    assert "not resumed since" in verdict
    # Before the edit, odd minutes were fire times; after it, they are not.
    assert (await explained(start + 29 * MINUTE + 60 * MINUTE))[0] == "not_a_fire_time"
    assert (await explained(start + 2 * MINUTE + 30 * S))[0] == "not_a_fire_time"
    outcome, reason, verdict = await explained(start - 2 * MINUTE)
    assert (outcome, reason) == ("no_row", "before_created")


@pytest.mark.one_group
async def test_history_is_pruned_with_the_executions_retention_by_the_scheduler_role(
    db_url: str, role_urls: dict[str, str]
) -> None:
    today = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    conn = await connect(db_url)
    scheduler = await connect(role_urls["scheduler"])
    try:
        for days, owner in ((40, "a"), (35, "b"), (1, "c")):
            await dispatch.take_shard(conn, 5, owner, today - timedelta(days=days))
        job_id = await jobs.create_job(
            conn,
            JobSpec(task="t", cron="0 * * * *"),
            tenant="acme",
            source=JobSource.API,
            shards=64,
            now=today - timedelta(days=41),
        )
        for days, change in ((40, jobs.pause_job), (39, jobs.resume_job), (1, jobs.pause_job)):
            await change(conn, job_id, now=today - timedelta(days=days))
        await maintain_partitions(scheduler, today=today.date(), ahead_days=1, retention_days=30)
        owners = await conn.fetch("SELECT owner FROM shard_epoch_history WHERE shard = 5")
        assert [r["owner"] for r in owners] == ["b", "c"]  # b held it when history begins
        kinds = await conn.fetch(
            "SELECT kind FROM job_events WHERE job_id = $1 ORDER BY at", job_id
        )
        assert [r["kind"] for r in kinds] == ["resumed", "paused"]
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await scheduler.execute("DELETE FROM job_events")
    finally:
        await conn.close()
        await scheduler.close()

"""A scheduler replica holds at most HORAE_PRELOAD_MAX_ROWS executions, whatever is due:
millions of executions due in one minute once grew it until it was OOM-killed (and
restarted into the same preload, again and again)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from prometheus_client import REGISTRY

from horae import broker
from horae.models import JobSource, JobSpec
from horae.scheduler.dispatcher import Dispatcher
from horae.store import jobs
from horae.store.db import Database
from tests.support.scheduling import messages
from tests.support.wait import until

# One group's dispatcher on its database (the cap split over groups: test_scheduler_groups).
pytestmark = pytest.mark.one_group


async def test_a_capped_replica_never_holds_more_than_its_cap_and_dispatches_everything(
    pool: asyncpg.Pool, publisher: broker.Publisher, broker_url: str, broker_prefix: str
) -> None:
    async def never_fenced(shard: int) -> None:
        raise AssertionError(f"fenced out of {shard}")

    d = Dispatcher(
        Database(pool),
        publisher,
        identity="d",
        window=timedelta(seconds=60),
        refresh_period=timedelta(seconds=2),
        lease_valid=lambda s: True,
        on_fenced=never_fenced,
        max_rows=500,
    )
    now = datetime.now(UTC)
    new = [
        jobs.NewJob(
            spec=JobSpec(task="t", run_at=now + timedelta(seconds=3, milliseconds=2 * i)),
            tenant="t",
            source=JobSource.API,
        )
        for i in range(5000)
    ]
    async with pool.acquire() as conn:
        await jobs.create_jobs(conn, new, shards=64, now=now)
    for shard in range(64):
        await d.gain(shard)
    await d.refresh()  # reads the shards gained, together
    assert len(d.held()) == 500, "the cap, not everything due in the window"
    stop = asyncio.Event()
    loops = [asyncio.create_task(d.run_refresh(stop)), asyncio.create_task(d.run_dispatch(stop))]
    try:

        async def all_published() -> bool:
            return len(d.published()) == 5000  # (no reaper here forgets any)

        await until(all_published, timeout=90, interval=0.25, what="all 5,000 dispatched")
    finally:
        stop.set()
        await asyncio.gather(*loops, return_exceptions=True)
    assert d.peak == 500, f"held {d.peak} at most"
    assert REGISTRY.get_sample_value("horae_preload_peak") == 500
    sent = await messages(broker_url, f"{broker_prefix}.held")
    assert len(sent) == 5000 and len({m.execution_id for m in sent}) == 5000, "each once"
    # the earliest due first: nothing waited while one due over a second later went out
    latest = sent[0].due_at
    for m in sent:
        assert latest - m.due_at <= timedelta(seconds=1), f"{m.due_at} went out after {latest}"
        latest = max(latest, m.due_at)

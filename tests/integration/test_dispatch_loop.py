"""The dispatch loop outlives a failed round whatever the error: asyncpg raises
`InternalClientError` ("cannot switch to state 15; another operation is in progress")
on a connection cut mid-operation, which is none of the connection errors the loop
caught, so the loop ended and the replica kept its shards without dispatching them.
(Found by the chaos suite, tests/chaos.)"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from horae import broker
from horae.scheduler.dispatcher import Dispatcher
from horae.store.db import Database
from tests.integration.test_dispatcher import job_in_shard
from tests.support.scheduling import messages
from tests.support.wait import until

pytestmark = pytest.mark.one_group  # one group's dispatcher on its database


async def test_a_round_failing_with_an_unclassified_error_does_not_stop_dispatching(
    pool: asyncpg.Pool,
    publisher: broker.Publisher,
    broker_url: str,
    broker_prefix: str,
) -> None:
    calls = 0

    def lease_valid(shard: int) -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:  # the first round fails as asyncpg failed in the chaos run
            raise asyncpg.exceptions.InternalClientError(
                "cannot switch to state 15; another operation (2) is in progress"
            )
        return True

    async def never_fenced(shard: int) -> None:
        raise AssertionError(f"fenced out of {shard}")

    d = Dispatcher(Database(pool), publisher, identity="d", window=timedelta(seconds=60),
                   refresh_period=timedelta(seconds=1), lease_valid=lease_valid,
                   on_fenced=never_fenced)  # fmt: skip
    job_id = await job_in_shard(pool, 1, datetime.now(UTC) + timedelta(seconds=1))
    await d.gain(1)
    stop = asyncio.Event()
    loops = [asyncio.create_task(d.run_refresh(stop)), asyncio.create_task(d.run_dispatch(stop))]
    try:

        async def published() -> bool:
            return {job_id} == {
                m.job_id for m in await messages(broker_url, f"{broker_prefix}.held")
            }

        await until(published, timeout=20, interval=0.2, what="the execution dispatched")
        assert calls >= 2, "dispatched in a later round, after the failed one"
    finally:
        stop.set()
        await asyncio.gather(*loops, return_exceptions=True)

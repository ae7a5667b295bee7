"""A create whose database connection dies mid-transaction fails and leaves nothing."""

from __future__ import annotations

import asyncio

import asyncpg
import httpx

from horae.store.db import connect
from tests.integration.api.conftest import Tenants, bearer
from tests.support.wait import until


async def test_connection_killed_mid_create_answers_503_and_writes_nothing(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool, db_url: str
) -> None:
    blocker = await connect(db_url)
    try:
        # Far-future executions land in the default partition: hold it so the create
        # (one statement: job row, then execution row) stops halfway.
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute("LOCK TABLE executions_default IN ACCESS EXCLUSIVE MODE")
        body = {"task": "t", "run_at": "2031-06-01T00:00:00Z"}
        request = asyncio.create_task(api.post("/jobs", json=body, headers=bearer(tenants.alice)))

        async def waiting_backend() -> int | None:
            # (not `blocker`: inside a transaction pg_stat_activity is a frozen snapshot)
            return await pool.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            )

        pid = await until(waiting_backend, timeout=10, what="the create waiting on the lock")
        assert await blocker.fetchval("SELECT pg_terminate_backend($1)", pid)
        response = await asyncio.wait_for(request, timeout=10)
        await tx.rollback()
    finally:
        await blocker.close()

    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert "nothing was written" in response.json()["detail"]
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0
    assert await pool.fetchval("SELECT count(*) FROM executions") == 0
    # and the API recovers: the next create works
    ok = await api.post("/jobs", json={"task": "t", "cron": "0 * * * *"},
                        headers=bearer(tenants.alice))  # fmt: skip
    assert ok.status_code == 201

"""A create whose database connection dies mid-transaction fails and leaves nothing."""

from __future__ import annotations

import asyncio

import asyncpg
import httpx
import pytest

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


async def test_a_connection_cut_mid_operation_answers_503_not_500(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # asyncpg raises InternalClientError ("cannot switch to state 12; another operation is
    # in progress") on a connection cut mid-operation; the API answered it with a bare 500,
    # which the chaos suite's client does not retry (seen on a DELETE after pg_terminate).
    created = await api.post("/jobs", json={"task": "t", "cron": "0 * * * *"},
                             headers=bearer(tenants.alice))  # fmt: skip
    job = created.json()["id"]
    from horae.store import jobs

    real = jobs.cancel_job

    async def cut_once(*args: object, **kwargs: object) -> object:
        monkeypatch.setattr(jobs, "cancel_job", real)
        raise asyncpg.InternalClientError(
            "cannot switch to state 12; another operation is in progress"
        )

    monkeypatch.setattr(jobs, "cancel_job", cut_once)
    refused = await api.delete(f"/jobs/{job}", headers=bearer(tenants.alice))
    assert refused.status_code == 503, refused.text
    assert refused.headers["retry-after"] == "1"
    assert await pool.fetchval("SELECT state::text FROM jobs WHERE id = $1", job) == "active"
    retried = await api.delete(f"/jobs/{job}", headers=bearer(tenants.alice))
    assert retried.status_code == 204, retried.text

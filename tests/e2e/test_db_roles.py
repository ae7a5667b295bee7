"""A scheduler and a worker connected as their own PostgreSQL roles (migration 004) fire a
job from end to end: the worker's role, which reads no table, claims it, runs it and
records its outcome."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from horae.models import JobSource, JobSpec
from horae.store import jobs
from horae.store.db import connect
from tests.support.db_roles import LoginRoles
from tests.support.groups import job_in
from tests.support.processes import Processes
from tests.support.store_rows import StoreRows
from tests.support.wait import until

pytestmark = pytest.mark.usefixtures("shared_default_pool")


async def test_a_scheduler_and_a_worker_under_their_roles_fire_a_job(
    processes: Processes, stored: StoreRows, login_roles: LoginRoles, db_url: str,
) -> None:  # fmt: skip
    processes.start("scheduler", "scheduler")
    processes.start("worker", "worker", "--tasks", "tests/e2e/tasks.py")
    database = db_url.rsplit("/", 1)[-1]

    async def both_connected_as_their_roles() -> set[str]:
        rows = await stored.fetch(
            "SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = $1", database
        )
        names = {r["usename"] for r in rows}
        wanted = {login_roles.names["scheduler"], login_roles.names["worker"]}
        return names if wanted <= names else set()

    await until(both_connected_as_their_roles, timeout=30, what="both roles connected")
    # In the last group (`second` of the split run, which the worker reaches as its role too).
    job_id = job_in(len(stored.pools) - 1)
    api = await connect(login_roles.urls(stored.urls[await stored.group_of(job_id)])["api"])
    try:
        run_at = datetime.now(UTC) + timedelta(seconds=2)
        await jobs.create_job(
            api, JobSpec(task="e2e.echo", run_at=run_at, payload={"greeting": "hi"}),
            tenant="t", source=JobSource.API, shards=64, now=datetime.now(UTC), job_id=job_id,
        )  # fmt: skip
    finally:
        await api.close()

    async def finished() -> asyncpg.Record | None:
        return await stored.fetchrow(
            "SELECT status, lease_owner FROM executions WHERE job_id = $1"
            " AND status NOT IN ('scheduled', 'queued', 'running')",
            job_id,
        )

    execution = await until(finished, timeout=30, what="a terminal execution")
    assert execution["status"] == "succeeded"
    assert execution["lease_owner"].startswith("worker")
    job = await stored.fetchrow("SELECT state, last_status FROM jobs WHERE id = $1", job_id)
    assert (job["state"], job["last_status"]) == ("completed", "succeeded")

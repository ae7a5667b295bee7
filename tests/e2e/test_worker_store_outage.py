"""A worker cut off from Postgres when its messages arrive (ahead of their due times, to be
claimed at once) and fall due: each claim fails on the connection, and the message goes
back to the queue a second later (`horae.worker.messages.REQUEUE_AFTER`), again and again,
until a claim gets through. So the executions start within seconds of Postgres being
reachable again. (Before, such a message was rejected, and its executions waited for the
reaper's 60 s redelivery.)"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from horae.models import JobSource, JobSpec
from horae.store import jobs
from tests.support.db_roles import LoginRoles
from tests.support.invocations import invocations
from tests.support.kube import free_port
from tests.support.metrics import scrape, value
from tests.support.processes import Processes
from tests.support.store_rows import StoreRows
from tests.support.wait import until, until_ready

TASKS = "tests/e2e/tasks.py"
# Only the worker's role is cut off, in the one database of the test's store.
pytestmark = [pytest.mark.usefixtures("shared_default_pool"), pytest.mark.one_group]
COUNT = 20
LEAD = 5  # seconds: the scheduler publishes this far ahead, and the worker claims on arrival


async def test_executions_whose_claims_failed_on_the_connection_start_once_postgres_is_back(
    processes: Processes, stored: StoreRows, db_url: str, login_roles: LoginRoles, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    scheduler_port = free_port()
    lead = {"HORAE_DISPATCH_LEAD_SECONDS": str(LEAD), "HORAE_METRICS_PORT": str(scheduler_port)}
    processes.start("scheduler", "scheduler", env=lead)
    port = free_port()
    processes.start("worker", "worker", "--tasks", TASKS, "--concurrency", "8",
                    env={"HORAE_TEST_LOG": str(log), "HORAE_METRICS_PORT": str(port)})  # fmt: skip
    assert (await until_ready(port)).startswith("consuming")

    now = datetime.now(UTC)
    first_due = now + timedelta(seconds=LEAD + 3)  # published 3 s from now: after the cut
    new = [
        jobs.NewJob(
            spec=JobSpec(task="e2e.echo", run_at=first_due + timedelta(seconds=i / COUNT)),
            tenant="t", source=JobSource.API,
        )
        for i in range(COUNT)
    ]  # fmt: skip
    await stored.create(new, now=now)
    role = login_roles.names["worker"]
    admin = await asyncpg.connect(db_url)
    try:
        # the worker's role out of reach: no new connection, its open ones cut
        await admin.execute(f'GRANT "{role}" TO CURRENT_USER')  # (to end its sessions)
        await admin.execute(f'ALTER ROLE "{role}" CONNECTION LIMIT 0')
        cut = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = $1",
            role,
        )
        assert cut > 0, "the worker had connections to cut"
        assert datetime.now(UTC) < first_due - timedelta(seconds=LEAD), "cut after the publish"

        async def published() -> bool:  # (the rows stay scheduled until claimed)
            samples = await scrape(f"http://127.0.0.1:{scheduler_port}/metrics")
            return value(samples, "horae_dispatched_total") == COUNT

        await until(published, timeout=LEAD + 3, interval=0.1, what="all published ahead")
        last_due = first_due + timedelta(seconds=1)
        await asyncio.sleep((last_due - datetime.now(UTC)).total_seconds() + 3)
        assert (
            await stored.count(
                "SELECT count(*) FROM executions WHERE tenant = 't' AND status = 'scheduled'"
            )
            == COUNT
        ), "nothing was claimed while the worker could not reach Postgres"
    finally:
        await admin.execute(f'ALTER ROLE "{role}" CONNECTION LIMIT -1')
        back = datetime.now(UTC)
        await admin.execute(f'REVOKE "{role}" FROM CURRENT_USER')
        await admin.close()

    async def all_succeeded() -> bool:
        sql = "SELECT count(*) FROM executions WHERE tenant = 't' AND status = 'succeeded'"
        return await stored.count(sql) == COUNT

    await until(all_succeeded, timeout=30, interval=0.5, what=f"{COUNT} executions succeeded")
    rows = await stored.fetch("SELECT id, started_at FROM executions WHERE tenant = 't'")
    assert len(rows) == COUNT, "one attempt each: nothing failed, nothing ran twice"
    assert Counter(c["execution_id"] for c in invocations(log)).most_common(1)[0][1] == 1
    after = sorted((r["started_at"] - back).total_seconds() for r in rows)
    assert after[-1] <= 5.0, f"started (s after Postgres was back): {[round(x, 2) for x in after]}"

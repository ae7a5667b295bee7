"""`horae worker` over a store split in two groups (two PostgreSQL clusters): it opens every
group from the catalog its HORAE_DATABASE_URL holds, runs executions of both, and on SIGTERM
past the grace period hands back in each group what still runs there."""

from __future__ import annotations

import asyncio
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from horae.models import ExecutionMessage, JobSource, JobSpec
from horae.store import jobs
from horae.store.groups import MAIN, group_env
from tests.e2e.test_worker import TASKS, publish
from tests.support.groups import SECOND, job_in
from tests.support.invocations import invocations
from tests.support.processes import Processes
from tests.support.wait import until

pytestmark = pytest.mark.usefixtures("shared_default_pool")


async def one_off(
    conn: asyncpg.Connection, shard: int, task: str, payload: dict[str, Any] | None = None
) -> ExecutionMessage:
    """A one-off job in `shard`, created in the group holding it: its execution's message."""
    now = datetime.now(UTC)
    spec = JobSpec(task=task, run_at=now, payload=payload or {})
    job_id = await jobs.create_job(conn, spec, tenant="t", source=JobSource.API, shards=64,
                                   now=now, job_id=job_in(shard))  # fmt: skip
    row = await conn.fetchrow("SELECT * FROM executions WHERE job_id = $1", job_id)
    return ExecutionMessage(
        execution_id=row["id"], job_id=job_id, task=task, tenant="t", due_at=row["due_at"],
        occurrence_at=row["occurrence_at"], attempt=1,
    )  # fmt: skip


async def status_of(conn: asyncpg.Connection, message: ExecutionMessage) -> str | None:
    status: str | None = await conn.fetchval(
        "SELECT status::text FROM executions WHERE id = $1", message.execution_id
    )
    return status


async def test_a_worker_process_runs_both_groups_and_hands_back_in_each(
    processes: Processes,
    groups: dict[str, asyncpg.Connection],
    second_url: str,
    broker_url: str,
    broker_prefix: str,
    tmp_path: Path,
) -> None:
    log = tmp_path / "calls.jsonl"
    # The worker's login role exists on the first cluster only: the second group's URL with
    # credentials is given as a deployment gives it (a Secret's), the rest from the catalog.
    env = {"HORAE_TEST_LOG": str(log), "HORAE_SHUTDOWN_GRACE_SECONDS": "1",
           group_env(SECOND): second_url}  # fmt: skip
    worker = processes.start("worker", "worker", "--tasks", TASKS, env=env)
    placed = {2: MAIN, 3: SECOND}
    echoes = [(await one_off(groups[g], s, "e2e.echo"), g) for s, g in placed.items()]
    await publish(broker_url, broker_prefix, *(m for m, _ in echoes))

    async def echoed() -> bool:
        return all([await status_of(groups[g], m) == "succeeded" for m, g in echoes])

    await until(echoed, timeout=30, what="both echoes succeeded, each in its group")

    slow = {"seconds": 60}
    sleepers = [(await one_off(groups[g], s + 2, "e2e.slow", slow), g) for s, g in placed.items()]
    await publish(broker_url, broker_prefix, *(m for m, _ in sleepers))

    async def running() -> bool:
        return all([await status_of(groups[g], m) == "running" for m, g in sleepers])

    await until(running, timeout=30, what="both sleepers running, each in its group")
    worker.signal(signal.SIGTERM)
    assert await asyncio.to_thread(worker.popen.wait, 20) == 0
    for message, group in sleepers:  # handed back where each lives: due again, not an attempt
        row = await groups[group].fetchrow(
            "SELECT status::text, attempt, lease_owner, due_at FROM executions WHERE id = $1",
            message.execution_id,
        )
        assert (row["status"], row["attempt"], row["lease_owner"]) == ("scheduled", 1, None)
        assert row["due_at"] > message.due_at - timedelta(seconds=1)
    assert len(invocations(log)) == 4

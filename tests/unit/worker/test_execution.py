"""The execution layer runs the tasks its worker was built with, and only those."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from horae.clock import DatabaseClock
from horae.config import WorkerSettings
from horae.models import ExecutionMessage, ExecutionStatus
from horae.store.executions import Claimed
from horae.worker.execution import Executions
from horae.worker.sdk import TaskContext, TaskDefinition, task

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def claimed(task_name: str, timeout_seconds: int | None = None) -> Claimed:
    return Claimed(
        id=uuid.uuid4(),
        job_id=uuid.uuid4(),
        tenant="t",
        task=task_name,
        shard=0,
        due_at=NOW,
        occurrence_at=NOW,
        attempt=1,
        job_version=1,
        payload={},
        timeout_seconds=timeout_seconds,
        retry_policy={},
        run_at=NOW,
        source="api",
        name=None,
        lease_until=NOW + timedelta(seconds=30),
    )


def executions(tasks: dict[str, TaskDefinition]) -> Executions:
    # Running a handler reaches neither the database nor the broker.
    return Executions(
        settings=WorkerSettings(),
        store=None,
        publisher=None,
        tasks=tasks,
        clock=DatabaseClock(),
    )


async def test_a_task_registered_but_not_given_to_the_worker_is_unknown_to_it() -> None:
    @task("unit.execution.elsewhere")
    async def elsewhere(ctx: TaskContext, payload: dict[str, Any]) -> None: ...

    outcome = await executions({})._attempt(claimed("unit.execution.elsewhere"))
    assert outcome.status == ExecutionStatus.FAILED
    assert outcome.error_kind == "PermanentError"
    assert "unknown task" in (outcome.error_message or "")


async def test_a_given_task_runs_with_its_context() -> None:
    seen: list[TaskContext] = []

    async def handler(ctx: TaskContext, payload: dict[str, Any]) -> None:
        seen.append(ctx)

    row = claimed("unit.execution.given")
    outcome = await executions({row.task: TaskDefinition(row.task, handler)})._attempt(row)
    assert outcome.status == ExecutionStatus.SUCCEEDED
    assert [ctx.execution_id for ctx in seen] == [row.id]


def test_a_jobs_timeout_overrides_its_tasks() -> None:
    async def handler(ctx: TaskContext, payload: dict[str, Any]) -> None: ...

    given = {"t": TaskDefinition("t", handler, timedelta(seconds=5))}
    assert executions(given).timeout_of(claimed("t")) == timedelta(seconds=5)
    assert executions(given).timeout_of(claimed("t", 7)) == timedelta(seconds=7)
    assert executions({}).timeout_of(claimed("t")) is None


async def test_a_held_execution_is_not_let_go_before_it_is_due_when_the_clock_is_resynced() -> None:
    """The hold sleeps on the event loop's clock, the due time is Postgres's: a heartbeat
    that re-measures the offset meanwhile (here: Postgres 20 ms behind what was thought)
    must not let the handler start before its due time by the new measure."""
    layer = executions({})
    clock = layer._clock
    due = clock.now() + timedelta(milliseconds=60)
    message = ExecutionMessage(
        execution_id=uuid.uuid4(),
        job_id=uuid.uuid4(),
        task="t",
        tenant="t",
        due_at=due,
        occurrence_at=due,
        attempt=1,
    )

    async def resync() -> None:
        await asyncio.sleep(0.02)
        clock.offset -= timedelta(milliseconds=20)

    resyncing = asyncio.create_task(resync())
    await layer._until_due(message)
    await resyncing
    assert clock.now() >= due


async def test_what_a_handler_returns_is_its_outcomes_result_sync_or_async() -> None:
    async def coroutine(ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        return {"sent": 3, "ids": (1, 2)}

    def plain(ctx: TaskContext, payload: dict[str, Any]) -> list[str]:
        return ["in", "a", "thread"]

    for handler, expected in (
        (coroutine, {"sent": 3, "ids": [1, 2]}),
        (plain, ["in", "a", "thread"]),
    ):
        row = claimed("unit.execution.result")
        outcome = await executions({row.task: TaskDefinition(row.task, handler)})._attempt(row)
        assert (outcome.status, outcome.result) == (ExecutionStatus.SUCCEEDED, expected)


async def test_a_result_that_cannot_be_stored_leaves_the_attempt_succeeded_with_a_marker() -> None:
    def unserialisable(ctx: TaskContext, payload: dict[str, Any]) -> object:
        return {"when": datetime(2030, 1, 1)}

    row = claimed("unit.execution.unserialisable")
    outcome = await executions({row.task: TaskDefinition(row.task, unserialisable)})._attempt(row)
    assert outcome.status == ExecutionStatus.SUCCEEDED
    assert outcome.result == {
        "horae.result_dropped": "result is not JSON-serialisable (TypeError: Object of type"
        " datetime is not JSON serializable)"
    }


async def test_a_handler_told_to_stop_is_cancelled_and_its_execution_ends_cancelled() -> None:
    started, stopped = asyncio.Event(), asyncio.Event()

    async def handler(ctx: TaskContext, payload: dict[str, Any]) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            stopped.set()
            raise

    row = claimed("unit.execution.stopped")
    layer = executions({row.task: TaskDefinition(row.task, handler)})
    attempt = asyncio.create_task(layer._attempt(row))
    await started.wait()
    assert layer.stop([row.id, uuid.uuid4()]) == 1  # another worker's execution: not here
    outcome = await attempt
    assert stopped.is_set()
    assert (outcome.status, outcome.error_kind) == (ExecutionStatus.CANCELLED, "cancel_requested")


async def test_an_execution_told_to_stop_before_its_handler_started_never_runs_it() -> None:
    # The scheduler saw the claim committed and told the worker before the claim's answer
    # reached the execution layer.
    ran: list[uuid.UUID] = []

    async def handler(ctx: TaskContext, payload: dict[str, Any]) -> None:
        ran.append(ctx.execution_id)

    row = claimed("unit.execution.early")
    layer = executions({row.task: TaskDefinition(row.task, handler)})
    assert layer.stop([row.id]) == 0
    outcome = await layer._attempt(row)
    assert ran == []
    assert (outcome.status, outcome.error_kind) == (ExecutionStatus.CANCELLED, "cancel_requested")
    # Remembered once: the same execution claimed again (handed back) runs.
    assert (await layer._attempt(row)).status == ExecutionStatus.SUCCEEDED and ran == [row.id]

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from horae.worker.sdk import TaskContext, current_context, registered_tasks, serving, task

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def context() -> TaskContext:
    return TaskContext(
        execution_id=uuid.uuid4(),
        job_id=uuid.uuid4(),
        attempt=1,
        occurrence_at=NOW,
        due_at=NOW,
        tenant="t",
        task="unit.sdk",
        logger=logging.LoggerAdapter(logging.getLogger(__name__)),
    )


def test_registered_tasks_are_a_copy_a_worker_is_built_from() -> None:
    @task("unit.sdk.registered")
    def handler(ctx: TaskContext, payload: dict[str, Any]) -> None: ...

    tasks = registered_tasks()
    assert tasks["unit.sdk.registered"].handler is handler
    tasks.clear()
    assert "unit.sdk.registered" in registered_tasks()


async def test_a_handler_started_while_serving_reads_its_context() -> None:
    ctx = context()

    async def read() -> TaskContext:
        return current_context()

    with serving(ctx):
        started = asyncio.ensure_future(read())
        in_thread = asyncio.ensure_future(asyncio.to_thread(current_context))
    assert await started is ctx
    assert await in_thread is ctx
    with pytest.raises(LookupError):
        current_context()

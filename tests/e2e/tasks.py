"""Task handlers the end-to-end tests run in real `horae worker` processes.

Every invocation is appended to the JSON-lines file named by HORAE_TEST_LOG (when set),
so tests can check what ran, where, and how often.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from horae import PermanentError, RetryableError, TaskContext, task


def record(ctx: TaskContext, event: str) -> None:
    path = os.environ.get("HORAE_TEST_LOG")
    if not path:
        return
    entry = {
        "event": event, "execution_id": str(ctx.execution_id), "job_id": str(ctx.job_id),
        "attempt": ctx.attempt, "idempotency_key": ctx.idempotency_key,
        "worker": os.environ.get("HORAE_IDENTITY"), "tenant": ctx.tenant, "at": time.time(),
    }  # fmt: skip
    with open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")


@task("e2e.echo")
async def echo(ctx: TaskContext, payload: dict[str, Any]) -> None:
    record(ctx, "start")


@task("e2e.report")
def report(ctx: TaskContext, payload: dict[str, Any]) -> Any:
    """A plain function (run in a thread) returning a result: `payload["result"]`, or
    `{"rows": [0, ..., rows - 1]}` when `rows` is given."""
    record(ctx, "start")
    if "rows" in payload:
        return {"rows": list(range(int(payload["rows"])))}
    return payload.get("result")


@task("e2e.flaky")
async def flaky(ctx: TaskContext, payload: dict[str, Any]) -> None:
    record(ctx, "start")
    if ctx.attempt <= int(payload.get("fail_times", 3)):
        raise RetryableError(f"attempt {ctx.attempt} failed on purpose")


@task("e2e.broken")
async def broken(ctx: TaskContext, payload: dict[str, Any]) -> None:
    record(ctx, "start")
    raise PermanentError("this payload can never work")


@task("e2e.slow")
async def slow(ctx: TaskContext, payload: dict[str, Any]) -> None:
    """Sleeps `seconds`; stopped (cancelled), it takes `cleanup` seconds to clean up first."""
    record(ctx, "start")
    try:
        await asyncio.sleep(float(payload.get("seconds", 5)))
    except asyncio.CancelledError:
        await asyncio.sleep(float(payload.get("cleanup", 0)))
        record(ctx, "cleaned")
        raise
    record(ctx, "end")


@task("e2e.blocking")
async def blocking(ctx: TaskContext, payload: dict[str, Any]) -> None:
    """An async handler that blocks its event loop for `seconds` (a blocking call where an
    await belongs): the worker's whole loop stands still meanwhile."""
    record(ctx, "start")
    time.sleep(float(payload.get("seconds", 5)))  # noqa: ASYNC251 (the point of it)
    record(ctx, "end")

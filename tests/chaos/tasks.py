"""The handlers the chaos suite's workers run; each invocation is written to the history.

Every worker process appends to its own file in HORAE_CHAOS_HISTORY (one JSON object a
line, fsync'd before the handler goes on), so a SIGKILL loses at most a line being
written, which the reader skips. A process under a clock offset (faketime) is told it
in HORAE_CHAOS_CLOCK_OFFSET, and writes real times.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any

from horae import RetryableError, TaskContext, task

_file: int | None = None


def _history() -> int | None:
    global _file
    directory = os.environ.get("HORAE_CHAOS_HISTORY")
    if directory and _file is None:
        name = f"{os.environ.get('HORAE_IDENTITY', 'worker')}-{os.getpid()}.jsonl"
        _file = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    return _file


def _append(fd: int, line: bytes) -> None:
    os.write(fd, line)
    os.fsync(fd)


async def record(ctx: TaskContext, event: str) -> None:
    """Append one line and fsync it, in a thread: an fsync on the event loop would hold up
    the worker's heartbeats (and its leases would lapse for a reason of the test's own)."""
    fd = _history()
    if fd is None:
        return
    entry = {
        "event": event, "execution_id": str(ctx.execution_id), "job_id": str(ctx.job_id),
        "attempt": ctx.attempt, "idempotency_key": ctx.idempotency_key,
        "occurrence_at": ctx.occurrence_at.timestamp(), "due_at": ctx.due_at.timestamp(),
        "tenant": ctx.tenant, "worker": os.environ.get("HORAE_IDENTITY", ""),
        "pid": os.getpid(),
        "at": time.time() - float(os.environ.get("HORAE_CHAOS_CLOCK_OFFSET", "0")),
    }  # fmt: skip
    await asyncio.to_thread(_append, fd, (json.dumps(entry) + "\n").encode())


@contextlib.asynccontextmanager
async def stop_noted(ctx: TaskContext) -> AsyncIterator[None]:
    """A handler stopped (cancelled: its worker hands the execution back, or the job was
    cancelled) records that it stopped: the worker hands an execution back only once its
    handler has ended, so this line comes before any other worker's start of it."""
    try:
        yield
    except asyncio.CancelledError:
        await record(ctx, "stopped")
        raise


@task("chaos.quick")
async def quick(ctx: TaskContext, payload: dict[str, Any]) -> None:
    await record(ctx, "start")
    async with stop_noted(ctx):
        await record(ctx, "end")


@task("chaos.flaky")
async def flaky(ctx: TaskContext, payload: dict[str, Any]) -> None:
    """Fails its first `fail_times` attempts (retryable), then succeeds."""
    await record(ctx, "start")
    async with stop_noted(ctx):
        if ctx.attempt <= int(payload.get("fail_times", 1)):
            await record(ctx, "fail")
            raise RetryableError(f"attempt {ctx.attempt} fails on purpose")
        await record(ctx, "end")


@task("chaos.slow")
async def slow(ctx: TaskContext, payload: dict[str, Any]) -> None:
    """Runs for `seconds`: longer than a lease, so it lives on heartbeats."""
    await record(ctx, "start")
    async with stop_noted(ctx):
        await asyncio.sleep(float(payload.get("seconds", 5)))
        await record(ctx, "end")

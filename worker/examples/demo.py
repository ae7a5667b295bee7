"""Handlers for `make demo`: one that succeeds, one that fails twice then succeeds,
and one that always fails (so its last attempt is dead-lettered)."""

from __future__ import annotations

from typing import Any

from horae import RetryableError, TaskContext, task


@task("demo.hello")
async def hello(ctx: TaskContext, payload: dict[str, Any]) -> None:
    ctx.logger.info("hello, %s (attempt %d)", payload.get("name", "world"), ctx.attempt)


@task("demo.flaky")
async def flaky(ctx: TaskContext, payload: dict[str, Any]) -> None:
    if ctx.attempt <= int(payload.get("fail_times", 2)):
        raise RetryableError(f"upstream busy on attempt {ctx.attempt}")


@task("demo.doomed")
def doomed(ctx: TaskContext, payload: dict[str, Any]) -> None:
    # A plain function: runs in the worker's thread pool.
    raise RetryableError("the dependency never comes back")

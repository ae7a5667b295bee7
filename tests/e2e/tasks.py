"""Task handlers the end-to-end tests run in real `horae worker` processes."""

from __future__ import annotations

from typing import Any

from horae import TaskContext, task


@task("e2e.echo")
async def echo(ctx: TaskContext, payload: dict[str, Any]) -> None:
    ctx.logger.info("echo attempt %d", ctx.attempt)

"""The benchmarks' handler: does nothing."""

from __future__ import annotations

from typing import Any

from horae import TaskContext, task


@task("bench.noop")
async def noop(ctx: TaskContext, payload: dict[str, Any]) -> None:
    return None

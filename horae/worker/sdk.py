"""The task SDK: `@task("name")` registers a handler; `TaskContext` describes the run.

    from horae import task, TaskContext, RetryableError

    @task("send-invoice", timeout=timedelta(seconds=30))
    async def send_invoice(ctx: TaskContext, payload: dict) -> None:
        ...

Plain (sync) functions run in a thread pool. The current context is also
reachable as `current_context()` from anywhere inside the handler.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeAlias, overload

Handler: TypeAlias = Callable[["TaskContext", dict[str, Any]], Awaitable[Any] | Any]


@dataclass(frozen=True, kw_only=True)
class TaskContext:
    """What a handler knows about the execution it serves."""

    execution_id: uuid.UUID
    job_id: uuid.UUID
    attempt: int
    occurrence_at: datetime
    due_at: datetime
    tenant: str
    task: str
    logger: logging.LoggerAdapter[logging.Logger] = field(repr=False)

    @property
    def idempotency_key(self) -> str:
        """Job id + occurrence: the same for every retry of one occurrence."""
        return f"{self.job_id}:{self.occurrence_at.isoformat()}"


_current: contextvars.ContextVar[TaskContext] = contextvars.ContextVar("horae_task_context")


def current_context() -> TaskContext:
    """The TaskContext of the handler running in this context."""
    return _current.get()


@contextlib.contextmanager
def serving(ctx: TaskContext) -> Iterator[None]:
    """Make `ctx` the current context inside the block: what a handler started there (a
    task or a thread, both copy the context) reads from `current_context()`."""
    token = _current.set(ctx)
    try:
        yield
    finally:
        _current.reset(token)


@dataclass(frozen=True)
class TaskDefinition:
    """A task a worker can run: what `@task` registers, and what a worker is built with."""

    name: str
    """The stable name messages and jobs carry."""
    handler: Handler
    timeout: timedelta | None = None
    """How long the handler may run when its job sets no timeout; None: unbounded."""


_registry: dict[str, TaskDefinition] = {}
"""Every `@task` of the process, by name: what importing a worker's tasks module declared."""


def registered_tasks() -> dict[str, TaskDefinition]:
    """The tasks registered so far, by name (a copy): what a worker is built to serve once
    its tasks module is imported."""
    return dict(_registry)


@overload
def task(name: str, *, timeout: timedelta | None = None) -> Callable[[Handler], Handler]: ...
@overload
def task(name: Handler) -> Handler: ...
def task(
    name: str | Handler, *, timeout: timedelta | None = None
) -> Callable[[Handler], Handler] | Handler:
    """Register a handler under a stable task name (the function name when used bare)."""

    def register(fn: Handler, task_name: str) -> Handler:
        if task_name in _registry and _registry[task_name].handler is not fn:
            raise ValueError(f"task {task_name!r} is already registered")
        _registry[task_name] = TaskDefinition(task_name, fn, timeout)
        return fn

    if callable(name):
        return register(name, name.__name__.replace("_", "-"))
    return lambda fn: register(fn, name)

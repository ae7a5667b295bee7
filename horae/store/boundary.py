"""Where driver errors become Horae's, once: nothing of asyncpg leaves the store.

Every public coroutine of the store is wrapped in `translated`, and every connection scope
the store hands out (`db.Database.acquire`, `db.session`) in `translating`: an asyncpg
error, or the socket's, leaves as one of `horae.errors`' `StoreError`s, with the driver's
error as its `__cause__` (as httpx maps httpcore's). Horae's own errors pass untouched.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, ParamSpec, TypeVar

import asyncpg

from horae.errors import HoraeError, StoreError, StoreUnavailable, TransactionAborted

P = ParamSpec("P")
T = TypeVar("T")

UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,  # a closed connection, or one busy with a cut operation
    asyncpg.InternalClientError,  # "cannot switch to state ...": a connection cut mid-operation
    asyncpg.PostgresConnectionError,
    asyncpg.OperatorInterventionError,  # admin shutdown, starting up, crash shutdown
    asyncpg.TooManyConnectionsError,
)
"""Errors of the connection, not of the statement: `StoreUnavailable`."""

ABORTED: tuple[type[BaseException], ...] = (
    asyncpg.DeadlockDetectedError,
    asyncpg.SerializationError,
)
"""A transaction Postgres rolled back and that may simply run again: `TransactionAborted`."""


def translate(exc: BaseException) -> HoraeError | None:
    """The Horae error `exc` becomes at the boundary; None for one that is not the driver's
    (a bug in Horae, or already Horae's), which passes as it is."""
    if isinstance(exc, HoraeError):
        return None
    if isinstance(exc, UNAVAILABLE):
        return StoreUnavailable(f"the job store is unavailable ({type(exc).__name__}: {exc})")
    if isinstance(exc, ABORTED):
        return TransactionAborted(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, asyncpg.PostgresError):
        return StoreError(f"{type(exc).__name__}: {exc}")
    return None


@asynccontextmanager
async def translating() -> AsyncIterator[None]:
    """A scope whose driver errors leave as Horae's."""
    try:
        yield
    except Exception as exc:
        ours = translate(exc)
        if ours is None:
            raise
        raise ours from exc


def translated(fn: Callable[P, Awaitable[T]]) -> Callable[P, Coroutine[Any, Any, T]]:
    """`fn`, raising Horae's errors instead of the driver's."""

    @functools.wraps(fn)
    async def call(*args: P.args, **kwargs: P.kwargs) -> T:
        async with translating():
            return await fn(*args, **kwargs)

    return call

"""Which failures of the database a worker outlives, and how: named once for both layers.

A connection's failure is never a message's fault (the message layer rejects it for the
reaper to publish again, the execution layer retries an outcome's write); a deadlock is
a batched write losing a race (run again). Anything else is the message's own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from horae.errors import StoreError, StoreUnavailable, TransactionAborted

log = logging.getLogger(__name__)
T = TypeVar("T")


TRANSIENT = (OSError, TimeoutError, StoreUnavailable)
"""Errors of the database connection, not of a message: the execution stays `queued` and the
reaper publishes it again. Any other error before an execution's ack point means the message
itself cannot be processed (a poison message): it is dead-lettered."""

OUTCOME_RETRIED = (*TRANSIENT, StoreError)
"""Errors an outcome's write is tried again after while the lease lasts: the connection's,
and any the server raised (a restart's, a deadlock): the outcome itself is never at fault."""


async def retrying(write: Callable[[], Awaitable[T]], attempts: int = 3) -> T:
    """Run a write transaction again when Postgres chose it as a deadlock victim (rolled
    back, so safe to repeat): batched writes of two workers can lock rows in crossing
    orders, e.g. a heartbeat and a batch of outcomes."""
    for attempt in range(1, attempts + 1):
        try:
            return await write()
        except TransactionAborted:
            if attempt == attempts:
                raise
            log.warning("deadlock on a batched write; retrying (%d/%d)", attempt, attempts)
    raise AssertionError("unreachable")


async def while_leased(
    write: Callable[[], Awaitable[T]], expired: Callable[[], bool], what: str, *args: object
) -> T | None:
    """`write()`, run again every 0.5 s after an `OUTCOME_RETRIED` failure (Postgres restarting,
    the connection cut) until `expired()` says the lease has run out: None then (logged as
    `what % args` failing: formatted only then), since the reaper has taken the execution
    back by that time."""
    while True:
        try:
            return await write()
        except OUTCOME_RETRIED:
            if expired():
                log.exception(what + "; its lease will run out", *args)
                return None
            await asyncio.sleep(0.5)

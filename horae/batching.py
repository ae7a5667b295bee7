"""Group commit: concurrent single-item writes coalesced into one transaction.

Each execution's claim and outcome (in a worker) and each single job create (in the
API) is written by its own coroutine; at hundreds a second, one transaction each would
make Postgres round trips the bottleneck. A `GroupCommit` lets every caller await its
own item while items submitted in the same loop turn, or while the previous flush was
in flight, go to the database together. There is no timer: an idle process writes at
once, a busy one in batches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class GroupCommit(Generic[T, R]):
    """`isolate`: a flush of several items that raises (any exception) is tried again item
    by item, so an item that cannot be written fails only its own submitter, never the
    others that happened to share its flush. Only for flushes that write nothing when they
    raise (one transaction) and may run again."""

    def __init__(
        self,
        flush: Callable[[Sequence[T]], Awaitable[Sequence[R]]],
        *,
        max_batch: int = 500,
        isolate: bool = False,
    ) -> None:
        self._flush = flush
        self._max_batch = max_batch
        self._isolate = isolate
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._drainer: asyncio.Task[None] | None = None

    async def submit(self, item: T) -> R:
        """Write `item` with whatever else is pending; its own answer, or the flush's error."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if self._drainer is None:
            self._drainer = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self._pending:
                await asyncio.sleep(0)  # let this loop turn's submitters join the batch
                batch = self._pending[: self._max_batch]
                del self._pending[: self._max_batch]
                error = await self._write(batch)
                if error is None:
                    continue
                if not self._isolate or len(batch) == 1:
                    _fail(batch, error)
                    continue
                # Each alone: an item that cannot be written fails only its own submitter.
                for one in batch:
                    error = await self._write([one])
                    if error is not None:
                        _fail([one], error)
        finally:
            self._drainer = None

    async def _write(self, batch: list[tuple[T, asyncio.Future[R]]]) -> Exception | None:
        """Flush `batch` and answer its submitters; when the flush raises, its error,
        leaving them unanswered."""
        try:
            answers = await self._flush([item for item, _ in batch])
            if len(answers) != len(batch):
                raise ValueError(f"{len(answers)} answers for {len(batch)} items")
        except Exception as exc:
            return exc
        for (_, future), answer in zip(batch, answers, strict=True):
            if not future.done():
                future.set_result(answer)
        return None


def _fail(batch: list[tuple[T, asyncio.Future[R]]], error: Exception) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(error)

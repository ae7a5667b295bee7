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
    def __init__(
        self, flush: Callable[[Sequence[T]], Awaitable[Sequence[R]]], *, max_batch: int = 500
    ) -> None:
        self._flush = flush
        self._max_batch = max_batch
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
                try:
                    answers = await self._flush([item for item, _ in batch])
                    if len(answers) != len(batch):
                        raise ValueError(f"{len(answers)} answers for {len(batch)} items")
                except Exception as exc:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, future), answer in zip(batch, answers, strict=True):
                    if not future.done():
                        future.set_result(answer)
        finally:
            self._drainer = None

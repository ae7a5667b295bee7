"""Group commit: concurrent submitters share flushes and each gets its own answer."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from horae.batching import GroupCommit


async def test_items_submitted_together_share_one_flush_and_get_their_own_answers() -> None:
    flushes: list[list[int]] = []

    async def flush(items: Sequence[int]) -> list[int]:
        flushes.append(list(items))
        await asyncio.sleep(0.01)
        return [i * 10 for i in items]

    commit = GroupCommit(flush, max_batch=4)
    answers = await asyncio.gather(*(commit.submit(i) for i in range(10)))
    assert answers == [i * 10 for i in range(10)]
    assert flushes == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


async def test_items_arriving_during_a_flush_go_in_the_next_one() -> None:
    flushes: list[list[str]] = []
    release = asyncio.Event()

    async def flush(items: Sequence[str]) -> list[str]:
        flushes.append(list(items))
        await release.wait()
        return list(items)

    commit = GroupCommit(flush)
    first = asyncio.ensure_future(commit.submit("a"))
    await asyncio.sleep(0.01)
    later = [asyncio.ensure_future(commit.submit(x)) for x in "bcd"]
    await asyncio.sleep(0.01)
    release.set()
    assert await asyncio.gather(first, *later) == ["a", "b", "c", "d"]
    assert flushes == [["a"], ["b", "c", "d"]]


async def test_a_failed_flush_fails_its_submitters_and_the_next_flush_still_runs() -> None:
    async def flush(items: Sequence[int]) -> list[int]:
        if 0 in items:
            raise ConnectionError("database went away")
        return list(items)

    commit = GroupCommit(flush)
    failing = asyncio.gather(commit.submit(0), commit.submit(1), return_exceptions=True)
    results = await failing
    assert all(isinstance(r, ConnectionError) for r in results)
    assert await commit.submit(2) == 2


async def test_a_flush_answering_the_wrong_number_of_items_is_an_error() -> None:
    async def flush(items: Sequence[int]) -> list[int]:
        return []

    with pytest.raises(ValueError):
        await GroupCommit(flush).submit(1)


async def test_with_isolate_an_item_that_fails_its_flush_fails_only_its_own_submitter() -> None:
    # One tenant's create raising (OverflowError, not a database error) failed every other
    # create that shared its group commit.
    flushes: list[list[int]] = []

    async def flush(items: Sequence[int]) -> list[int]:
        flushes.append(list(items))
        if 13 in items:
            raise OverflowError("date value out of range")
        return [i * 10 for i in items]

    commit = GroupCommit(flush, isolate=True)
    results = await asyncio.gather(
        *(commit.submit(i) for i in (11, 12, 13, 14)), return_exceptions=True
    )
    assert results[:2] == [110, 120] and results[3] == 140
    assert isinstance(results[2], OverflowError)
    assert flushes == [[11, 12, 13, 14], [11], [12], [13], [14]]

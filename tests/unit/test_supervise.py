"""A long-running part that ends on its own stops its process (exit status 1)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from horae.errors import PartFailed
from horae.supervise import Supervisor


async def _loop_until(stop: asyncio.Event) -> None:
    await stop.wait()


async def _fails_after(seconds: float) -> None:
    await asyncio.sleep(seconds)
    raise TypeError("'<' not supported between instances of 'Due' and 'Due'")


def test_a_part_that_raises_stops_the_process_and_fails_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> Supervisor:
        stop = asyncio.Event()
        supervisor = Supervisor(stop)
        steady = asyncio.create_task(_loop_until(stop), name="dispatch-main")
        broken = asyncio.create_task(_fails_after(0.01), name="dispatch-second")
        supervisor.watch([steady, broken])
        await asyncio.wait_for(stop.wait(), timeout=5)  # set by the failure
        await steady
        return supervisor

    with caplog.at_level(logging.CRITICAL, logger="horae.supervise"):
        supervisor = asyncio.run(main())
    assert supervisor.failed == ["dispatch-second"]
    [record] = [r for r in caplog.records if r.name == "horae.supervise"]
    assert record.getMessage() == (
        "dispatch-second failed while the process runs: stopping the process"
    )
    assert record.exc_info is not None and isinstance(record.exc_info[1], TypeError)
    with pytest.raises(PartFailed, match="dispatch-second ended on its own"):
        supervisor.check()


def test_a_part_that_returns_early_stops_the_process_too() -> None:
    async def main() -> list[str]:
        stop = asyncio.Event()
        supervisor = Supervisor(stop)
        supervisor.watch([asyncio.create_task(asyncio.sleep(0), name="reaper-main")])
        await asyncio.wait_for(stop.wait(), timeout=5)
        return supervisor.failed

    assert asyncio.run(main()) == ["reaper-main"]


def test_parts_ending_once_stopping_or_cancelled_are_not_failures() -> None:
    async def main() -> Supervisor:
        stop = asyncio.Event()
        supervisor = Supervisor(stop)
        loop = asyncio.create_task(_loop_until(stop), name="leases")
        beat = asyncio.create_task(asyncio.sleep(60), name="beat")
        supervisor.watch([loop, beat])
        await asyncio.sleep(0)
        stop.set()
        beat.cancel()
        await asyncio.gather(loop, beat, return_exceptions=True)
        return supervisor

    supervisor = asyncio.run(main())
    assert supervisor.failed == []
    supervisor.check()  # does not raise

"""The task-stack dump a stuck process gives on SIGUSR1."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import pytest

from horae import logs
from tests.support.wait import until


async def _waits_forever(gate: asyncio.Event) -> None:
    await gate.wait()


def test_sigusr1_logs_every_task_with_where_it_waits(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        logs.dump_tasks_on(loop)
        gate = asyncio.Event()
        stuck = asyncio.create_task(_waits_forever(gate), name="dispatch-second")
        await asyncio.sleep(0)
        try:
            with caplog.at_level(logging.WARNING, logger="horae.logs"):
                os.kill(os.getpid(), signal.SIGUSR1)

                async def dumped() -> bool:  # the handler runs in the loop
                    return any(r.name == "horae.logs" for r in caplog.records)

                await until(dumped, timeout=5, interval=0.01, what="the dump")
        finally:
            loop.remove_signal_handler(signal.SIGUSR1)
            gate.set()
            await stuck

    asyncio.run(main())
    [record] = [r for r in caplog.records if r.name == "horae.logs"]
    text = record.getMessage()
    assert text.startswith("task stacks (on SIGUSR1):")
    section = text.split("--- dispatch-second\n", 1)[1].split("\n--- ", 1)[0]
    assert "_waits_forever" in section and "await gate.wait()" in section

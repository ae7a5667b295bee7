"""`horae dev`: the API, a scheduler, a worker and the operator on one machine, for local
development, each a child process of one supervisor.

Child processes rather than tasks in one event loop: every component installs its own
signal handlers, the scheduler replaces the loop's default executor, the operator may
exit the process when it loses its Lease, and uvicorn runs its own loop. The children
share the supervisor's environment (HORAE_IDENTITY gets the component's name appended;
HORAE_METRICS_PORT is not passed on, as they would all bind it). SIGTERM, SIGINT or
SIGHUP to the supervisor is passed on as one SIGTERM per child; when a child exits by
itself, the others are stopped too and the supervisor fails.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence

log = logging.getLogger(__name__)


def commands(*, tasks: str, port: int) -> dict[str, list[str]]:
    """The `horae` command line of each component."""
    horae = [sys.executable, "-m", "horae"]
    return {
        "api": [*horae, "api", "--port", str(port)],
        "scheduler": [*horae, "scheduler"],
        "worker": [*horae, "worker", "--tasks", tasks],
        "operator": [*horae, "operator"],
    }


def _child_env(name: str, env: Mapping[str, str]) -> dict[str, str]:
    child = {k: v for k, v in env.items() if k != "HORAE_METRICS_PORT"}
    if "HORAE_IDENTITY" in env:
        child["HORAE_IDENTITY"] = f"{env['HORAE_IDENTITY']}-{name}"
    return child


async def supervise(
    components: Mapping[str, Sequence[str]], *, grace: float, env: Mapping[str, str] | None = None
) -> int:
    """Run `components` until a signal (0) or until one of them exits by itself (1).

    Stopping sends each child SIGTERM and waits `grace` seconds before SIGKILL.
    """
    env = os.environ if env is None else env
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    children: dict[str, asyncio.subprocess.Process] = {}
    failed = False
    try:
        for name, argv in components.items():
            # A session of its own: a terminal's Ctrl-C reaches the supervisor only, which
            # passes exactly one SIGTERM on.
            children[name] = await asyncio.create_subprocess_exec(
                *argv, env=_child_env(name, env), start_new_session=True
            )
            log.info("dev: started %s (pid %d)", name, children[name].pid)
        exits = {asyncio.create_task(p.wait()): name for name, p in children.items()}
        stopped = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([*exits, stopped], return_when=asyncio.FIRST_COMPLETED)
        for ended in done - {stopped}:
            failed = True
            log.error(
                "dev: %s exited with code %s; stopping the others", exits[ended], ended.result()
            )
        stopped.cancel()
    finally:
        await _stop_all(children, grace)
    return 1 if failed else 0


async def _stop_all(children: Mapping[str, asyncio.subprocess.Process], grace: float) -> None:
    alive = {name: p for name, p in children.items() if p.returncode is None}
    for p in alive.values():
        p.terminate()

    async def reap(name: str, p: asyncio.subprocess.Process) -> None:
        try:
            await asyncio.wait_for(p.wait(), grace)
        except TimeoutError:
            log.warning("dev: %s did not stop within %.0fs; killing it", name, grace)
            p.kill()
            await p.wait()

    await asyncio.gather(*(reap(name, p) for name, p in alive.items()))

"""A process's long-running parts are loops built to outlive any one failure; one that ends
anyway (an exception its loop did not catch, or a return) must not leave the process running
without it. A scheduler whose dispatch loop of one store group had died kept renewing the
Leases of that group's shards and dispatched nothing for them, with no error logged (its
executions waited for ever). So a part that ends before the process is stopping is logged
with its traceback and stops the process, which exits with status 1: Kubernetes restarts it
and its shards go to the other replicas meanwhile."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from horae.errors import PartFailed

log = logging.getLogger(__name__)


class Supervisor:
    """Watches the parts of a process that run until `stop` is set."""

    def __init__(self, stop: asyncio.Event) -> None:
        self._stop = stop
        self.failed: list[str] = []
        """The parts that ended on their own, in the order they did."""

    def watch(self, tasks: Iterable[asyncio.Task[None]]) -> None:
        for task in tasks:
            task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if self._stop.is_set() or task.cancelled():
            return  # stopping: every part ends (cancelled: on purpose, by the process)
        error = task.exception()
        how = "failed" if error else "returned"
        log.critical(
            "%s %s while the process runs: stopping the process", task.get_name(), how,
            exc_info=error,
        )  # fmt: skip
        self.failed.append(task.get_name())
        self._stop.set()

    def check(self) -> None:
        """Once stopped: raise if a part's end stopped the process (exit status 1)."""
        if self.failed:
            raise PartFailed(f"stopped because {', '.join(self.failed)} ended on its own")

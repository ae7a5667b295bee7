"""Structured (JSON lines) logging for every Horae process.

Records carry `job_id`, `execution_id` and `shard` when the caller passes them
in `extra`; payloads and connection strings are never logged.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import signal
import sys
from datetime import UTC, datetime

_FIELDS = ("job_id", "execution_id", "shard", "tenant")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in _FIELDS:
            if hasattr(record, name):
                entry[name] = getattr(record, name)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("aiormq", "aio_pika", "kubernetes.client.rest", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # kopf's DEBUG lines carry whole resources, payloads included: never below INFO.
    logging.getLogger("kopf").setLevel(max(root.level, logging.INFO))


def task_stacks() -> str:
    """Every asyncio task of the running loop with where it waits now, as text."""
    out = io.StringIO()
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    for task in tasks:
        out.write(f"--- {task.get_name()}\n")
        task.print_stack(limit=30, file=out)
    return out.getvalue()


def dump_tasks_on(loop: asyncio.AbstractEventLoop, sig: int = signal.SIGUSR1) -> None:
    """`kill -USR1 <pid>` logs every task's stack (one WARNING record): what a process
    that stopped making progress without an error waits on."""

    def dump() -> None:
        logging.getLogger(__name__).warning("task stacks (on SIGUSR1):\n%s", task_stacks())

    loop.add_signal_handler(sig, dump)

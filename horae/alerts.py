"""The optional dead-execution webhook: one JSON POST per execution that ended `dead`,
whoever found it: the worker that recorded its last attempt, or the scheduler's reaper
when that attempt's worker stopped heartbeating.

The dead-letter queue is the durable record and the `horae_dead_letters_total` metric
the alert to page on; the webhook is a convenience for chat or incident tools, so it is
sent in the background, retried a few times, and never holds up the worker or a reaper
sweep.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any
from uuid import UUID

log = logging.getLogger(__name__)

ATTEMPTS = 3
TIMEOUT_SECONDS = 5.0


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "horae"},
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
        return int(response.status)


def dead_event(
    *,
    execution_id: UUID,
    job_id: UUID,
    job_name: str | None,
    tenant: str,
    task: str,
    attempt: int,
    occurrence_at: datetime,
    error_kind: str | None,
    error_message: str | None,
) -> dict[str, Any]:
    """The webhook's JSON event for one dead execution."""
    return {
        "type": "horae.execution.dead",
        "execution_id": execution_id,
        "job_id": job_id,
        "job_name": job_name,
        "tenant": tenant,
        "task": task,
        "attempt": attempt,
        "occurrence_at": occurrence_at,
        "error_kind": error_kind,
        "error_message": error_message,
    }


class DeadWebhook:
    """The webhook of one process: `send` POSTs in the background, each POST kept
    referenced until it is done; nothing is sent when no URL is set."""

    def __init__(self, url: str | None) -> None:
        self._url = url
        self._sending: set[asyncio.Task[bool]] = set()

    def send(self, event: dict[str, Any]) -> None:
        """POST `event` (a `dead_event`) in the background, if a URL is set."""
        if not self._url:
            return
        task = asyncio.create_task(post_dead(self._url, event))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)


async def post_dead(url: str, event: dict[str, Any]) -> bool:
    """POST `event` to `url`; True once it answered 2xx, False after `ATTEMPTS` failures."""
    body = json.dumps(event, default=str).encode()
    for attempt in range(1, ATTEMPTS + 1):
        try:
            status = await asyncio.to_thread(_post, url, body)
            if 200 <= status < 300:
                return True
            log.warning("dead-execution webhook answered %d (attempt %d)", status, attempt)
        except (urllib.error.URLError, OSError) as exc:
            log.warning("dead-execution webhook failed (attempt %d): %s", attempt, exc)
        await asyncio.sleep(0.5 * 2**attempt)
    return False

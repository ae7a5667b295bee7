"""Run-now from a manifest: a ScheduledJob's `horae.dev/trigger` annotation.

Each new value of the annotation runs the job once, now, as a manual execution (what
`horae jobs trigger` and `POST /jobs/{id}:trigger` do); the same value again runs nothing.
Which value ran is decided in the store, in the job's row (`jobs.trigger_once`: the value
replaces the last one in the transaction that inserts the execution), so an operator
restarting, a re-apply of the same manifest or an event seen twice never runs it again.
The status's `lastTrigger` shows the value handled and spares the store a look at every
event of the resource. A value the ScheduledJob is created with runs nothing
(`scheduledjob.sync_job` records it): restoring a manifest does not run its job.

Any value will do (a timestamp, a counter, a commit id), up to 253 characters:
`kubectl annotate scheduledjob NAME horae.dev/trigger="$(date +%s)" --overwrite`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from horae.clock import utc_now
from horae.domain.instants import rfc3339
from horae.errors import Conflict, NotFound
from horae.kube import Events
from horae.resources import TRIGGER_ANNOTATION, TRIGGER_MAX_CHARS
from horae.store import jobs, routing
from horae.store.groups import Store

log = logging.getLogger(__name__)


def pending(
    annotations: Mapping[str, str],
    status: Mapping[str, Any],
    meta: Mapping[str, Any],
    event: Mapping[str, Any],
    **_: Any,
) -> bool:
    """Whether the resource's trigger value is not the one its status shows handled (kopf's
    `when` filter: most events of a ScheduledJob are its own status writes)."""
    value = annotations.get(TRIGGER_ANNOTATION)
    if value is None or meta.get("deletionTimestamp") or event.get("type") == "DELETED":
        return False
    last = status.get("lastTrigger") or {}
    return bool(last.get("value") != value)


def handled(value: str, execution_id: uuid.UUID | None, now: datetime) -> dict[str, Any]:
    """The status's `lastTrigger`."""
    return {
        "value": value,
        "executionId": str(execution_id) if execution_id else None,
        "time": rfc3339(now),
    }


async def run(
    store: Store, events: Events, uid: uuid.UUID, namespace: str, name: str, value: str
) -> dict[str, Any] | None:
    """Run the ScheduledJob `uid` once for the trigger `value`, unless its job ran that
    value already; an Event says what happened. Returns the status's `lastTrigger`, or None
    when the job is not stored yet (its creation records the value)."""
    now = utc_now()

    async def event(reason: str, message: str, *, warning: bool) -> None:
        await events.emit(
            kind="ScheduledJob",
            namespace=namespace,
            name=name,
            uid=str(uid),
            reason=reason,
            message=message,
            warning=warning,
        )

    if len(value) > TRIGGER_MAX_CHARS:
        await event(
            "TriggerRefused",
            f"{TRIGGER_ANNOTATION}: at most {TRIGGER_MAX_CHARS} characters; nothing run",
            warning=True,
        )
        return handled(value, None, now)
    try:
        execution_id = await routing.on_job(
            store, uid, lambda conn: jobs.trigger_once(conn, uid, value, now=now)
        )
    except NotFound:
        return None
    except Conflict as exc:
        await event("TriggerRefused", f"{TRIGGER_ANNOTATION}={value}: {exc}", warning=True)
        return handled(value, None, now)
    if execution_id is not None:
        log.info(
            "triggered ScheduledJob %s/%s (%s): execution %s", namespace, name, value, execution_id
        )
        await event(
            "Triggered",
            f"{TRIGGER_ANNOTATION}={value}: manual execution {execution_id}",
            warning=False,
        )
    return handled(value, execution_id, now)

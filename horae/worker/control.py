"""The worker's control queue: the scheduler tells the worker holding an execution to stop
its handler now (a Replace occurrence replaced it), rather than at the worker's next
heartbeat (every lease/3). The queue is the worker's own (`broker.declare_control_queue`:
exclusive, deleted with its connection, bound by the worker's identity, the lease owner its
claims write). Messages are best-effort, never acked: the execution's `cancel_requested`
mark is the rule, and the heartbeat finds it when a message is lost.
"""

from __future__ import annotations

import logging

import pydantic

from horae import broker
from horae.models import CancelRunning
from horae.worker.execution import Executions

log = logging.getLogger(__name__)


async def follow(queue: broker.Queue, executions: Executions) -> str:
    """Consume `queue`, stopping the handlers each message names; the consumer tag."""

    async def on_message(message: broker.IncomingMessage) -> None:
        try:
            told = CancelRunning.model_validate_json(message.body)
        except pydantic.ValidationError:
            log.warning("control message %s is not a CancelRunning: dropped", message.message_id)
            return
        stopped = executions.stop(told.execution_ids)
        log.info(
            "told to stop %d executions: %d handlers cancelled", len(told.execution_ids), stopped
        )

    return await queue.consume(on_message, no_ack=True)

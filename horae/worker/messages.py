"""The message layer: what a worker does with its pool's queue.

`Messages` consumes the queue and takes each dispatch message apart: one that is too big,
not an `ExecutionBatch`, or for a tenant this worker does not serve is dead-lettered. Each
of its executions goes to the execution layer with a way to claim it: claims are
group-committed, and a group that fails for a reason other than the connection is tried
claim by claim, so one poison message fails only itself. The message is acked once every
execution in it reached its ack point (`AckPoints`), given back to the queue a second
after a claim lost the connection, and dead-lettered when one could not be claimed at
all. On shutdown it stops consuming, gives running messages the grace period, then hands
back what still runs.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence

import pydantic

from horae import broker, metrics
from horae.clock import DatabaseClock
from horae.config import WorkerSettings
from horae.domain.fields import first_error
from horae.errors import HoraeError
from horae.models import ExecutionBatch, ExecutionMessage
from horae.probes import Probes
from horae.store import executions as store
from horae.store.executions import Claimed
from horae.store.groups import Store
from horae.worker.execution import Executions
from horae.worker.failures import TRANSIENT, retrying
from horae.worker.routing import GroupCommits, Routes

log = logging.getLogger(__name__)

REQUEUE_AFTER = 1.0
"""Seconds a message whose claim failed on the database connection is held before it goes
back to its queue, to be claimed by whichever worker reaches Postgres first. Before, it was
rejected and its executions waited for the reaper's redelivery timeout (60 s) after
Postgres came back; held a second, a Postgres outage makes each held message one delivery
a second, not a busy loop."""

FOREIGN = "foreign-tenant"
"""The dead-letter reason of a message with an execution of a tenant this worker does not
serve, or naming another tenant than its execution's row."""


class ForeignExecution(HoraeError):
    """The claim refused an execution that is not this worker's to run (`store.Refused`)."""


class AckPoints:
    """Where a message's executions stand: each reaches its ack point (`reach`) or ends
    without it (`end`, from its task's done callback); `all_settled` resolves once every
    one has done either. One future per message rather than a waiter per execution."""

    def __init__(self, count: int) -> None:
        self._reached = [False] * count
        self._open = count
        self.all_settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not count:
            self.all_settled.set_result(None)

    def reach(self, index: int) -> None:
        if not self._reached[index]:
            self._reached[index] = True
            self._settle()

    def reached(self, index: int) -> bool:
        return self._reached[index]

    def end(self, index: int, _task: object = None) -> None:
        if not self._reached[index]:
            self._settle()

    def _settle(self) -> None:
        self._open -= 1
        if self._open == 0 and not self.all_settled.done():
            self.all_settled.set_result(None)


class Messages:
    """The messages of one pool's queue: consumed, claimed, acked or dead-lettered."""

    def __init__(
        self,
        *,
        settings: WorkerSettings,
        store: Store,
        publisher: broker.Publisher,
        executions: Executions,
        clock: DatabaseClock,
    ) -> None:
        self._cfg = settings
        self._routes = Routes(store)
        self._publisher = publisher
        self._executions = executions
        self._clock = clock
        self._claims = GroupCommits(self._claim_batch)

    async def consume(self, queue: broker.Queue, stop: asyncio.Event, probes: Probes) -> None:
        """Consume `queue` (ready on `probes` meanwhile) until `stop`; then let the messages
        being worked on finish within the grace period, and hand back what still runs."""
        inflight: set[asyncio.Task[None]] = set()

        def settled(work: asyncio.Task[None]) -> None:
            inflight.discard(work)
            if not work.cancelled() and work.exception() is not None:
                log.warning("message not acknowledged: %s", work.exception())

        async def on_message(message: broker.IncomingMessage) -> None:
            # aio-pika cancels its consumer's callbacks when the broker connection drops. The
            # work goes on regardless: its claims hold leases in Postgres and its outcomes
            # are recorded there; only the ack is lost (the message comes back, finds its
            # executions finished, and is dropped). Cancelled, the handlers would be
            # abandoned, neither recorded nor handed back, and run again once their leases
            # ran out.
            work = asyncio.ensure_future(self.handle(message))
            inflight.add(work)
            work.add_done_callback(settled)
            await asyncio.shield(work)

        tag = await queue.consume(on_message)
        probes.ready(f"consuming {queue.name}")
        served = ", ".join(self._cfg.tenants)
        log.info("worker %s consuming %s for tenants %s", self._cfg.identity, queue.name, served)
        await stop.wait()
        probes.unready("stopping")
        log.info("worker %s stopping: %d running", self._cfg.identity, len(inflight))
        await queue.cancel(tag)
        if inflight:
            await asyncio.wait(set(inflight), timeout=self._cfg.shutdown_grace.total_seconds())
        if inflight:
            await self.hand_back()

    async def handle(self, message: broker.IncomingMessage) -> None:
        """One dispatch message: each of its executions runs on its own (within the
        concurrency limit); the message is acked once every execution in it has reached
        its ack point, and never if one was interrupted (shutdown) before that.

        A message that is too big, not an `ExecutionBatch`, or whose executions cannot be
        claimed for a reason other than the database connection is dead-lettered. One whose
        claim failed on the connection goes back to its queue `REQUEUE_AFTER` later (its rows
        stay `queued`; the reaper's redelivery is the backstop), so it never holds a
        prefetch slot for good."""
        batch = await self._accept(message)
        if batch is None:
            return
        points = AckPoints(len(batch))
        runs = [
            asyncio.ensure_future(self._execute(m, functools.partial(points.reach, i)))
            for i, m in enumerate(batch)
        ]
        for i, run in enumerate(runs):
            run.add_done_callback(functools.partial(points.end, i))
        await points.all_settled
        await self._settle(message, batch, runs, points)
        results = await asyncio.gather(*runs, return_exceptions=True)
        for result in results:
            if isinstance(result, TRANSIENT):  # one line: an outage fails every claim
                log.warning("execution stopped: the database is out of reach (%s)", result)
            elif isinstance(result, BaseException) and not isinstance(
                result, asyncio.CancelledError | ForeignExecution
            ):
                log.error("execution failed outside its handler", exc_info=result)

    async def _accept(self, message: broker.IncomingMessage) -> list[ExecutionMessage] | None:
        """The executions of `message`; None, once it is dead-lettered, when it is too big,
        not an `ExecutionBatch`, or has an execution of a tenant not served here."""
        if len(message.body) > broker.MAX_MESSAGE_BYTES:
            why = f"{len(message.body)} bytes; the limit is {broker.MAX_MESSAGE_BYTES}"
            await self._refuse(message, "oversized", why)
            return None
        try:
            batch = ExecutionBatch.model_validate_json(message.body).executions
        except pydantic.ValidationError as exc:
            first = first_error(exc)
            await self._refuse(message, "malformed", f"{first.path()}: {first.message}")
            return None
        foreign = sorted({m.tenant for m in batch} - set(self._cfg.tenants))
        if foreign:  # nothing of it runs, not even executions of tenants it does serve
            why = f"tenants {foreign} are not served here (this worker serves {self._cfg.tenants})"
            await self._refuse(message, FOREIGN, why)
            return None
        return batch

    async def _settle(
        self,
        message: broker.IncomingMessage,
        batch: Sequence[ExecutionMessage],
        runs: Sequence[asyncio.Future[None]],
        points: AckPoints,
    ) -> None:
        """Once every execution of `message` has settled: ack it if all reached their ack
        points; else leave it (shutting down), give it back to the queue a moment later
        (the database connection lost) or dead-letter it."""
        failed = [
            (run, m)
            for i, (run, m) in enumerate(zip(runs, batch, strict=True))
            if not points.reached(i) and run.done()
        ]
        if all(points.reached(i) for i in range(len(batch))):
            await message.ack()
        elif any(run.cancelled() for run, _ in failed):
            pass  # shutting down: left unacked, RabbitMQ gives it back
        elif any(isinstance(run.exception(), TRANSIENT) for run, _ in failed):
            await asyncio.sleep(REQUEUE_AFTER)
            await message.nack(requeue=True)
        else:
            raised = [run.exception() for run, _ in failed]
            if any(isinstance(e, ForeignExecution) for e in raised):
                reason, errors = FOREIGN, "; ".join(str(e) for e in raised)
            else:
                reason = "unprocessable"
                errors = "; ".join(
                    f"{m.execution_id}: {type(run.exception()).__name__}" for run, m in failed
                )
            await self._refuse(message, reason, errors)

    async def _refuse(self, message: broker.IncomingMessage, reason: str, why: str) -> None:
        """Dead-letter a message that cannot be processed (the head of its body, its reason
        in the `reason` header), then ack it: it is never redelivered."""
        log.error("message %s dead-lettered (%s): %s", message.message_id, reason, why)
        await self._publisher.dead_letter(
            message.body[: broker.DEAD_LETTER_BODY_BYTES],
            str(message.message_id or ""),
            {"reason": reason, "error": why[:1000]},
        )
        metrics.dead_letters.inc()
        metrics.refused.labels(reason).inc()
        await message.ack()

    async def _execute(self, body: ExecutionMessage, reach_ack_point: Callable[[], None]) -> None:
        """Run one execution of a message; it reaches its ack point once its outcome is
        recorded (or nothing was left to run), or once claimed if its handler is long."""
        claim = functools.partial(self._claim, body, reach_ack_point)
        await self._executions.run(body, claim)
        reach_ack_point()

    async def _claim(
        self, body: ExecutionMessage, reach_ack_point: Callable[[], None]
    ) -> Claimed | store.Early | None:
        """Claim `body`'s execution in the group of its job's shard (or where that shard moved
        to meanwhile); None when there is nothing to run (throttled, duplicate or stale),
        `Early` when it is not claimed ahead of its due time (a limited tenant's). Raises
        `ForeignExecution` when the claim refused it.

        One claimed ahead of its due time reaches its ack point with the claim: from then on
        its lease (from the due time) and the reaper keep it, so its message no longer holds
        a prefetch slot while it waits."""
        request = store.ClaimRequest(body.execution_id, body.due_at, body.tenant)
        claimed = await self._routes.follow(
            self._routes.shard_of_job(body.job_id),
            lambda group: self._claims.submit(group, request),
            lambda answer: answer is not None,
        )
        if isinstance(claimed, Exception):
            raise claimed
        if isinstance(claimed, store.Refused):
            raise ForeignExecution(claimed.reason)
        if isinstance(claimed, store.Throttled):
            log.info(
                "execution %s: tenant %s at its limit, due again at %s",
                body.execution_id,
                body.tenant,
                claimed.due_at,
            )
            metrics.throttled.inc()
            return None
        if claimed is None:
            log.info("execution %s: duplicate or stale, dropped", body.execution_id)
            return None
        if isinstance(claimed, store.Early):
            return claimed
        if self._acks_at_claim(claimed) or self._clock.now() < claimed.due_at:
            reach_ack_point()
        return claimed

    def _acks_at_claim(self, claimed: Claimed) -> bool:
        """Long (or unbounded) handlers: ack once the claim holds a lease, so RabbitMQ's
        consumer timeout never redelivers a message whose handler is still running."""
        timeout = self._executions.timeout_of(claimed)
        half = self._cfg.consumer_timeout.total_seconds() / 2
        return timeout is None or timeout.total_seconds() > half

    async def _claim_many(
        self, group: str, requests: Sequence[store.ClaimRequest]
    ) -> list[store.Answer]:
        async with self._routes.database(group).acquire() as conn:
            return await retrying(
                lambda: store.claim_many(
                    conn,
                    requests,
                    owner=self._cfg.identity,
                    now=self._clock.now(),
                    lease=self._cfg.lease,
                    serves=self._cfg.tenants,
                )
            )

    async def _claim_batch(
        self, group: str, requests: Sequence[store.ClaimRequest]
    ) -> Sequence[store.Answer | Exception]:
        """Claims committed together; when the group fails for a reason other than the
        connection, each is tried alone, so that one unclaimable request (a poison message)
        fails only itself, not the executions that happened to share its transaction."""
        try:
            return await self._claim_many(group, requests)
        except TRANSIENT:
            raise
        except Exception:
            if len(requests) == 1:
                raise
        answers: list[store.Answer | Exception] = []
        for request in requests:
            try:
                answers += await self._claim_many(group, [request])
            except TRANSIENT:
                raise
            except Exception as exc:
                answers.append(exc)
        return answers

    async def hand_back(self) -> None:
        """Grace period over: stop the handlers still running (nothing is recorded or acked
        for them) and put their executions back to `scheduled`, due now, for another worker,
        in the group of each one's shard (or where the shard moved to meanwhile).

        An execution is handed back only once its handler has ended, so another worker never
        starts it while it still runs here (`Executions.stop_handlers`)."""
        ended = await self._executions.stop_handlers()
        released = 0
        for group, ids in sorted(self._routes.by_group(ended).items()):
            try:
                released += await self._release(group, ids, ended)
            except Exception:  # one group out of reach: the others are still handed back
                log.exception("cannot hand back %d executions in group %s", len(ids), group)
        log.warning("handed back %d unfinished executions", released)

    async def _release(
        self, group: str, ids: list[uuid.UUID], shards: Mapping[uuid.UUID, int]
    ) -> int:
        """Hand `ids` back in `group`, and those not found there where their shards went."""
        released = await self._release_in(group, ids)
        if released < len(ids):
            moved = await self._routes.moved_executions(group, ids, shards)
            for there, moved_ids in sorted(moved.items()):
                released += await self._release_in(there, moved_ids)
        return released

    async def _release_in(self, group: str, ids: list[uuid.UUID]) -> int:
        async with self._routes.database(group).acquire() as conn:
            return await store.release_running(
                conn, owner=self._cfg.identity, ids=ids, now=self._clock.now()
            )

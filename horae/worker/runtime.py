"""`horae worker`: consume a pool's queue, claim, run handlers, record outcomes, ack.

A message carries a batch of executions of one task. Per execution: wait until it
is due by Postgres's clock (the scheduler publishes up to its dispatch lead early) -> claim (one
UPDATE; no row = duplicate or stale: drop) -> run the handler under its timeout
-> record the outcome (and any retry execution); the message is acked once every
execution in it got that far (a long handler's, once it is claimed). A crash
before that leaves the message unacked, so RabbitMQ redelivers it (claims already
made fail and are dropped); a crash after a claim leaves a lease the reaper
reclaims.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import importlib.util
import inspect
import logging
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pydantic

from horae import alerts, broker, metrics
from horae.batching import GroupCommit
from horae.clock import DatabaseClock
from horae.config import Settings
from horae.errors import (
    HoraeError,
    PermanentError,
    StoreError,
    StoreUnavailable,
    TransactionAborted,
)
from horae.models import ExecutionBatch, ExecutionMessage, ExecutionStatus, RetryPolicy
from horae.probes import Probes
from horae.store import executions as store
from horae.store.db import Database
from horae.store.executions import Claimed
from horae.worker.outcome import Outcome, classify
from horae.worker.sdk import REGISTRY, TaskContext, _current

log = logging.getLogger(__name__)
T = TypeVar("T")


def load_tasks(spec: str) -> None:
    """Import the module (dotted name or .py path) whose `@task` handlers this worker runs."""
    if spec.endswith(".py"):
        path = Path(spec).resolve()
        mod_spec = importlib.util.spec_from_file_location(path.stem, path)
        if mod_spec is None or mod_spec.loader is None:
            raise ImportError(f"cannot load tasks from {spec}")
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[path.stem] = module
        mod_spec.loader.exec_module(module)
    else:
        importlib.import_module(spec)


TRANSIENT = (OSError, TimeoutError, StoreUnavailable)
"""Errors of the database connection, not of a message: the execution stays `queued` and the
reaper publishes it again. Any other error before an execution's ack point means the message
itself cannot be processed (a poison message): it is dead-lettered."""

OUTCOME_RETRIED = (*TRANSIENT, StoreError)
"""Errors an outcome's write is tried again after while the lease lasts: the connection's,
and any the server raised (a restart's, a deadlock): the outcome itself is never at fault."""


async def _retrying(write: Callable[[], Awaitable[T]], attempts: int = 3) -> T:
    """Run a write transaction again when Postgres chose it as a deadlock victim (rolled
    back, so safe to repeat): batched writes of two workers can lock rows in crossing
    orders, e.g. a heartbeat and a batch of outcomes."""
    for attempt in range(1, attempts + 1):
        try:
            return await write()
        except TransactionAborted:
            if attempt == attempts:
                raise
            log.warning("deadlock on a batched write; retrying (%d/%d)", attempt, attempts)
    raise AssertionError("unreachable")


FOREIGN = "foreign-tenant"
"""The dead-letter reason of a message with an execution of a tenant this worker does not
serve, or naming another tenant than its execution's row."""


class ForeignExecution(HoraeError):
    """The claim refused an execution that is not this worker's to run (`store.Refused`)."""


HOLD_LIMIT = timedelta(seconds=60)
"""The longest a worker holds an execution that arrived before its due time: the scheduler's
dispatch lead (at most 10 s) plus room for a scheduler whose clock runs ahead."""


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


class Worker:
    def __init__(self, settings: Settings, pool: Database, publisher: broker.Publisher):
        self._cfg = settings.worker
        self._pool = pool
        self._publisher = publisher
        self.clock = DatabaseClock()
        """Every instant this worker writes (lease ends, retry times, hand-back due times)
        is read from Postgres's clock, so a skewed host cannot shorten its leases."""
        self._handlers: dict[uuid.UUID, asyncio.Task[Any]] = {}
        self._held: set[uuid.UUID] = set()
        """Executions claimed and not yet recorded: the only ones heartbeats keep. One whose
        claim's answer or outcome's write was lost (Postgres restarted, the connection was
        cut) is let go, so its lease runs out and the reaper recovers it."""
        self._slots = asyncio.Semaphore(self._cfg.concurrency)
        self._cancel_requested: set[uuid.UUID] = set()
        self._webhook = alerts.DeadWebhook(self._cfg.dead_webhook)
        self._claims = GroupCommit(self._claim_batch)
        self._finishes = GroupCommit(self._finish_batch)

    async def _claim(self, requests: Sequence[store.ClaimRequest]) -> list[store.Answer]:
        async with self._pool.acquire() as conn:
            return await _retrying(
                lambda: store.claim_many(
                    conn,
                    requests,
                    owner=self._cfg.identity,
                    now=self.clock.now(),
                    lease=self._cfg.lease,
                    serves=self._cfg.tenants,
                )
            )

    async def _claim_batch(
        self, requests: Sequence[store.ClaimRequest]
    ) -> Sequence[store.Answer | Exception]:
        """Claims committed together; when the group fails for a reason other than the
        connection, each is tried alone, so that one unclaimable request (a poison message)
        fails only itself, not the executions that happened to share its transaction."""
        try:
            return await self._claim(requests)
        except TRANSIENT:
            raise
        except Exception:
            if len(requests) == 1:
                raise
        answers: list[store.Answer | Exception] = []
        for request in requests:
            try:
                answers += await self._claim([request])
            except TRANSIENT:
                raise
            except Exception as exc:
                answers.append(exc)
        return answers

    async def _finish_batch(self, outcomes: Sequence[store.Finish]) -> list[bool]:
        async with self._pool.acquire() as conn:
            return await _retrying(
                lambda: store.finish_many(
                    conn, outcomes, owner=self._cfg.identity, now=self.clock.now()
                )
            )

    def _acks_at_claim(self, claimed: Claimed) -> bool:
        """Long (or unbounded) handlers: ack once the claim holds a lease, so RabbitMQ's
        consumer timeout never redelivers a message whose handler is still running."""
        definition = REGISTRY.get(claimed.task)
        seconds = claimed.timeout_seconds or (
            definition.timeout.total_seconds() if definition and definition.timeout else None
        )
        return seconds is None or seconds > self._cfg.consumer_timeout.total_seconds() / 2

    async def _refuse(self, message: broker.IncomingMessage, reason: str, why: str) -> None:
        """Dead-letter a message that cannot be processed (the head of its body, its reason
        in the `reason` header), then ack it: it is never redelivered."""
        log.error("message %s dead-lettered (%s): %s", message.message_id, reason, why)
        await self._publisher.dead_letter(
            message.body[: broker.DEAD_LETTER_BODY_BYTES], str(message.message_id or ""),
            {"reason": reason, "error": why[:1000]},
        )  # fmt: skip
        metrics.dead_letters.inc()
        metrics.refused.labels(reason).inc()
        await message.ack()

    async def handle(self, message: broker.IncomingMessage) -> None:
        """One dispatch message: each of its executions runs on its own (within the
        concurrency limit); the message is acked once every execution in it has reached
        its ack point, and never if one was interrupted (shutdown) before that.

        A message that is too big, not an `ExecutionBatch`, or whose executions cannot be
        claimed for a reason other than the database connection is dead-lettered. One whose
        claim failed on the connection is rejected without requeue (its rows stay `queued`
        and the reaper publishes them again), so it never holds a prefetch slot for good."""
        if len(message.body) > broker.MAX_MESSAGE_BYTES:
            await self._refuse(message, "oversized", f"{len(message.body)} bytes; the limit "
                               f"is {broker.MAX_MESSAGE_BYTES}")  # fmt: skip
            return
        try:
            batch = ExecutionBatch.model_validate_json(message.body).executions
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            await self._refuse(message, "malformed", f"{where}: {first['msg']}")
            return
        foreign = sorted({m.tenant for m in batch} - set(self._cfg.tenants))
        if foreign:  # nothing of it runs, not even executions of tenants it does serve
            why = f"tenants {foreign} are not served here (this worker serves {self._cfg.tenants})"
            await self._refuse(message, FOREIGN, why)
            return
        points = AckPoints(len(batch))
        runs = [
            asyncio.ensure_future(self._execute(m, functools.partial(points.reach, i)))
            for i, m in enumerate(batch)
        ]
        for i, run in enumerate(runs):
            run.add_done_callback(functools.partial(points.end, i))
        await points.all_settled
        failed = [
            (run, m) for i, (run, m) in enumerate(zip(runs, batch, strict=True))
            if not points.reached(i) and run.done()
        ]  # fmt: skip
        if all(points.reached(i) for i in range(len(batch))):
            await message.ack()
        elif any(run.cancelled() for run, _ in failed):
            pass  # shutting down: left unacked, RabbitMQ gives it back
        elif any(isinstance(run.exception(), TRANSIENT) for run, _ in failed):
            await message.nack(requeue=False)
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
        results = await asyncio.gather(*runs, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(
                result, asyncio.CancelledError | ForeignExecution
            ):
                log.error("execution failed outside its handler", exc_info=result)

    async def _execute(self, body: ExecutionMessage, reach_ack_point: Callable[[], None]) -> None:
        await self._until_due(body)
        # A slot is a running handler: the outcome's write happens after it is given back
        # (the message stays unacked until then, so prefetch still bounds the backlog).
        async with self._slots:
            ran = await self._claim_and_run(body, reach_ack_point)
        if ran is not None:
            try:
                await self._record(body, *ran)
            finally:
                self._held.discard(ran[0].id)
        reach_ack_point()

    async def _until_due(self, body: ExecutionMessage) -> None:
        """Hold an execution published ahead of its due time (the scheduler's dispatch lead),
        without a slot, until it is due by Postgres's clock: a handler never starts early,
        even when a scheduler's clock runs ahead. Its message stays unacked meanwhile.

        One due more than `HOLD_LIMIT` ahead was not published by a lead: it goes on at once
        (and a message no database can hold is dead-lettered by its claim, as before)."""
        early = (body.due_at - self.clock.now()).total_seconds()
        if early > HOLD_LIMIT.total_seconds():
            log.warning("execution %s is due %.0f s from now, more than any dispatch lead: "
                        "not held", body.execution_id, early)  # fmt: skip
        elif early > 0:
            await asyncio.sleep(early)

    async def _claim_and_run(
        self, body: ExecutionMessage, reach_ack_point: Callable[[], None]
    ) -> tuple[Claimed, Outcome] | None:
        """Claim and run the handler; None when there was nothing to run (throttled,
        duplicate or stale)."""
        claimed = await self._claims.submit(
            store.ClaimRequest(body.execution_id, body.due_at, body.tenant)
        )
        if isinstance(claimed, Exception):
            raise claimed
        if isinstance(claimed, store.Refused):
            raise ForeignExecution(claimed.reason)
        if isinstance(claimed, store.Throttled):
            log.info("execution %s: tenant %s at its limit, due again at %s",
                     body.execution_id, body.tenant, claimed.due_at)  # fmt: skip
            metrics.throttled.inc()
            return None
        if claimed is None:
            log.info("execution %s: duplicate or stale, dropped", body.execution_id)
            return None
        self._held.add(claimed.id)
        if self._acks_at_claim(claimed):
            reach_ack_point()
        metrics.start_lag.observe((self.clock.now() - claimed.due_at).total_seconds())
        metrics.in_flight.inc()
        started = time.monotonic()
        try:
            return claimed, await self._run(claimed)
        except BaseException:
            self._held.discard(claimed.id)
            raise
        finally:
            metrics.in_flight.dec()
            metrics.run_duration.observe(time.monotonic() - started)

    async def _record(self, body: ExecutionMessage, claimed: Claimed, outcome: Outcome) -> None:
        """Write the outcome (only if this claim still holds the execution); dead-letter and
        alert on a dead one."""
        finish = store.Finish(claimed, outcome.status, outcome.error_kind, outcome.error_message,
                              retry_at=outcome.retry_at)  # fmt: skip
        # Postgres restarting or the connection cut: try again while the lease lasts (after
        # that the reaper has ended the attempt and the write would find nothing to record).
        give_up = time.monotonic() + self._cfg.lease.total_seconds()
        while True:
            try:
                recorded = await self._finishes.submit(finish)
                break
            except OUTCOME_RETRIED:
                if time.monotonic() > give_up:
                    log.exception("execution %s: outcome not recorded; its lease will run out",
                                  claimed.id)  # fmt: skip
                    return
                await asyncio.sleep(0.5)
        if recorded and outcome.status == "dead":
            await self._publisher.dead_letter(
                body.model_dump_json().encode(), str(claimed.id),
                {"reason": outcome.error_message or ""},
            )  # fmt: skip
            metrics.dead_letters.inc()
            self._webhook.send(
                alerts.dead_event(
                    execution_id=claimed.id,
                    job_id=claimed.job_id,
                    job_name=claimed.name,
                    tenant=claimed.tenant,
                    task=claimed.task,
                    attempt=claimed.attempt,
                    occurrence_at=claimed.occurrence_at,
                    error_kind=outcome.error_kind,
                    error_message=outcome.error_message,
                )
            )
        if recorded:
            metrics.outcomes.labels(outcome.status.value).inc()
            if outcome.retry_at is not None:
                metrics.retries.inc()

    async def _run(self, claimed: Claimed) -> Outcome:
        extra = {"execution_id": str(claimed.id), "job_id": str(claimed.job_id)}
        ctx = TaskContext(
            execution_id=claimed.id,
            job_id=claimed.job_id,
            attempt=claimed.attempt,
            occurrence_at=claimed.occurrence_at,
            due_at=claimed.due_at,
            tenant=claimed.tenant,
            task=claimed.task,
            logger=logging.LoggerAdapter(log, extra),
        )
        definition = REGISTRY.get(claimed.task)
        error: BaseException | None = None
        if definition is None:
            error = PermanentError(f"unknown task {claimed.task!r}: no handler registered")
        else:
            timeout = (
                timedelta(seconds=claimed.timeout_seconds)
                if claimed.timeout_seconds
                else definition.timeout
            )
            token = _current.set(ctx)
            try:
                coro: Awaitable[Any]
                if inspect.iscoroutinefunction(definition.handler):
                    coro = definition.handler(ctx, claimed.payload)
                else:  # plain functions run in the default thread pool (context copied)
                    coro = asyncio.to_thread(definition.handler, ctx, claimed.payload)
                handler = asyncio.ensure_future(
                    asyncio.wait_for(coro, timeout.total_seconds() if timeout else None)
                )
                self._handlers[claimed.id] = handler
                await handler
            except asyncio.CancelledError:
                if claimed.id not in self._cancel_requested:
                    raise  # the worker itself is being cancelled
                error = None
            except Exception as exc:
                error = exc
            finally:
                _current.reset(token)
                self._handlers.pop(claimed.id, None)
        if claimed.id in self._cancel_requested:
            self._cancel_requested.discard(claimed.id)
            ctx.logger.info("attempt %d cancelled on request", claimed.attempt)
            return Outcome(
                ExecutionStatus.CANCELLED, "cancel_requested",
                "cancelled while running: the job was cancelled or replaced",
            )  # fmt: skip
        outcome = classify(
            error, attempt=claimed.attempt, now=self.clock.now(),
            policy=lambda: RetryPolicy.model_validate(claimed.retry_policy),
        )  # fmt: skip
        ctx.logger.info("attempt %d ended %s", claimed.attempt, outcome.status)
        return outcome

    async def hand_back(self) -> None:
        """Grace period over: stop the handlers still running (nothing is recorded or acked
        for them) and put their executions back to `scheduled`, due now, for another worker.

        A stopped handler may still be cleaning up (a cancelled handler's `finally`): an
        execution is handed back only once its handler has ended, so another worker never
        starts it while it still runs here. One that has not ended within `stop_wait` keeps
        its lease until this process exits, and the reaper recovers it when that lapses."""
        handlers = dict(self._handlers)
        for handler in handlers.values():
            handler.cancel()
        wait = self._cfg.stop_wait.total_seconds()
        if handlers:
            await asyncio.wait(handlers.values(), timeout=wait)
        ids = [execution_id for execution_id, handler in handlers.items() if handler.done()]
        if len(ids) < len(handlers):
            log.warning("%d handlers still running %.0f s after being stopped: left to the "
                        "reaper", len(handlers) - len(ids), wait)  # fmt: skip
        async with self._pool.acquire() as conn:
            released = await store.release_running(conn, owner=self._cfg.identity, ids=ids,
                                                   now=self.clock.now())  # fmt: skip
        log.warning("handed back %d unfinished executions", released)

    async def heartbeat(self, stop: asyncio.Event) -> None:
        period = self._cfg.lease.total_seconds() / 3
        while not stop.is_set():
            try:
                async with self._pool.acquire() as conn:
                    cancel = await store.heartbeat(
                        conn, owner=self._cfg.identity, now=self.clock.now(), lease=self._cfg.lease,
                        ids=list(self._held),
                    )  # fmt: skip
                    await self.clock.sync(conn)
                for execution_id in cancel:
                    handler = self._handlers.get(execution_id)
                    if handler is not None and not handler.done():
                        self._cancel_requested.add(execution_id)
                        handler.cancel()
            except Exception:  # the loop must outlive any one failure, or every lease lapses
                log.exception("heartbeat failed")
            try:
                await asyncio.wait_for(stop.wait(), timeout=period)
            except TimeoutError:
                pass


async def run(settings: Settings, tasks_module: str) -> None:
    load_tasks(tasks_module)
    cfg = settings.worker
    pool = await Database.open(settings.database.url, size=settings.database.pool_size)
    connection = await broker.connect(settings.broker.url)
    names = broker.Names(settings.broker.prefix)
    publisher = broker.Publisher(connection, names)
    await publisher.start()
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=cfg.concurrency)
    queue = await broker.bind_pool(
        channel,
        names,
        namespace=cfg.pool_namespace,
        pool=cfg.pool,
        tenants=cfg.tenants,
        tasks=REGISTRY,
    )
    worker = Worker(settings, pool, publisher)
    async with pool.acquire() as conn:
        await worker.clock.sync(conn)
    probes = Probes()
    probes.serve(settings.metrics_port)
    beat = asyncio.create_task(probes.beat())

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    inflight: set[asyncio.Task[None]] = set()

    def settled(work: asyncio.Task[None]) -> None:
        inflight.discard(work)
        if not work.cancelled() and work.exception() is not None:
            log.warning("message not acknowledged: %s", work.exception())

    async def on_message(message: broker.IncomingMessage) -> None:
        # aio-pika cancels its consumer's callbacks when the broker connection drops. The
        # work goes on regardless: its claims hold leases in Postgres and its outcomes are
        # recorded there; only the ack is lost (the message comes back, finds its
        # executions finished, and is dropped). Cancelled, the handlers would be abandoned,
        # neither recorded nor handed back, and run again once their leases ran out.
        work = asyncio.ensure_future(worker.handle(message))
        inflight.add(work)
        work.add_done_callback(settled)
        await asyncio.shield(work)

    heartbeat_stop = asyncio.Event()  # heartbeats go on through the grace period
    heartbeat = asyncio.create_task(worker.heartbeat(heartbeat_stop))
    tag = await queue.consume(on_message)
    probes.ready(f"consuming {queue.name}")
    served = ", ".join(cfg.tenants)
    log.info("worker %s consuming %s for tenants %s", cfg.identity, queue.name, served)
    log.info("worker %s runs tasks %s", cfg.identity, sorted(REGISTRY))
    await stop.wait()
    probes.unready("stopping")
    log.info("worker %s stopping: %d running", cfg.identity, len(inflight))
    await queue.cancel(tag)
    if inflight:
        await asyncio.wait(set(inflight), timeout=cfg.shutdown_grace.total_seconds())
    if inflight:
        await worker.hand_back()
    heartbeat_stop.set()
    heartbeat.cancel()
    beat.cancel()
    await connection.close()
    await pool.close()

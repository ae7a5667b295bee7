"""The execution layer: hold an execution until due, run its handler, record its outcome.

Given one execution of a message and a way to claim it (both from the message layer),
`Executions` claims one that arrived ahead of its due time at once (its lease runs from the
due time) and holds it until due by Postgres's clock, or claims one already due within the
concurrency limit; then runs its task's handler with its `TaskContext` and under its timeout,
turns how it ended into an outcome (`outcome.classify`) and records that (a dead one is
also copied to the dead-letter queue and announced to the webhook). Heartbeats extend the
leases of the executions it holds and cancel those whose job asked for it; `stop` cancels
them at once when the scheduler says so on the worker's control queue (`control`).
Messages, acks and the queue are the message layer's; nothing here knows of them.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from horae import alerts, broker, metrics
from horae.clock import DatabaseClock
from horae.config import WorkerSettings
from horae.domain.limits import RESULT_DROPPED_KEY, stored_result
from horae.errors import PermanentError
from horae.models import ExecutionMessage, ExecutionStatus, RetryPolicy
from horae.store import executions as store
from horae.store.executions import Claimed, Early
from horae.store.groups import Store
from horae.worker.failures import retrying, while_leased
from horae.worker.outcome import Outcome, classify
from horae.worker.promises import Promises
from horae.worker.routing import GroupCommits, Routes
from horae.worker.sdk import TaskContext, TaskDefinition, serving

log = logging.getLogger(__name__)

Claim = Callable[[], Awaitable[Claimed | Early | None]]
"""Claims the execution being run: its row; None when there is nothing to run; `Early` when it
is not claimed before its due time (a limited tenant's)."""

OUTCOMES_DEFERRED = 0.5
"""The longest outcomes wait for a burst of starts (`StartsFirst`), in seconds."""

LEASE_MARGIN = timedelta(seconds=1)
"""A handler is started only if its execution's lease (as this worker knows it: the claim's,
or a heartbeat's that extended it) lasts at least this much longer; else the reaper may be
giving the execution to another worker, or ending the attempt."""

EARLY_TRIES = 20
"""How often a claim made once due by this worker's clock is tried again, `EARLY_RETRY` apart,
when the claim found it not yet due (the clock re-measured in between)."""
EARLY_RETRY = 0.05

EARLY_STOPS = 1024
"""How many stop requests for executions not running here are remembered, in case one of
them was claimed and its handler is about to start (the claim's answer still on its way)."""

HOLD_LIMIT = timedelta(seconds=60)
"""The longest a worker holds an execution that arrived before its due time: the scheduler's
dispatch lead (at most 10 s) plus room for a scheduler whose clock runs ahead."""


class StartsFirst:
    """Outcomes wait while a burst of executions, due, waits for handler slots: in a burst
    (more due at once than the worker's concurrency, e.g. a top of the hour claimed ahead)
    the worker's loop and the database spend the instant on starting handlers, and the
    outcomes' writes come after, in fuller batches. They wait at most `OUTCOMES_DEFERRED`
    at a time, so a worker that stays saturated still records."""

    def __init__(self, concurrency: int) -> None:
        self._burst = concurrency
        self._queued = 0
        self._gate: asyncio.Future[None] | None = None
        """Unresolved while outcomes wait."""

    def queued(self) -> None:
        """One more execution, due, waits for a slot."""
        self._queued += 1
        if self._queued > self._burst and (self._gate is None or self._gate.done()):
            loop = asyncio.get_running_loop()
            self._gate = gate = loop.create_future()
            loop.call_later(OUTCOMES_DEFERRED, self._open, gate)

    def dequeued(self) -> None:
        """It has its slot (or gave up waiting)."""
        self._queued -= 1
        if self._queued == 0 and self._gate is not None:
            self._open(self._gate)

    async def gone(self) -> None:
        """Returns once no burst waits to start (or `OUTCOMES_DEFERRED` after it began)."""
        if self._gate is not None and not self._gate.done():
            await self._gate

    @staticmethod
    def _open(gate: asyncio.Future[None]) -> None:
        if not gate.done():
            gate.set_result(None)


class Executions:
    """The executions this worker runs: their handlers, their leases, their outcomes."""

    def __init__(
        self,
        *,
        settings: WorkerSettings,
        store: Store,
        publisher: broker.Publisher,
        tasks: Mapping[str, TaskDefinition],
        clock: DatabaseClock,
    ) -> None:
        self._cfg = settings
        self._routes = Routes(store)
        self._publisher = publisher
        self._tasks = tasks
        self._clock = clock
        self._handlers: dict[uuid.UUID, tuple[int, asyncio.Task[Any]]] = {}
        """The handlers running, by execution id, with their executions' shards."""
        self._due: dict[tuple[str, datetime], asyncio.Future[str | None]] = {}
        """By store group and due time: the one wait (until due, then for a promise reaching
        it) that the executions claimed ahead and due at that instant share (`_fallen_due`)."""
        self._leased: dict[uuid.UUID, datetime] = {}
        """Executions claimed ahead of their due time and not started yet, waiting for it or
        for a slot (their shards are in `_held`), with when their leases end as far as this
        worker knows (the claim's, then each heartbeat's that extended it)."""
        self._stopping = False
        """Stopping: an execution claimed ahead is handed back, not started."""
        self._held: dict[uuid.UUID, int] = {}
        """Executions claimed and not yet recorded, with their shards: the only ones
        heartbeats keep. One whose claim's answer or outcome's write was lost (Postgres
        restarted, the connection was cut) is let go, so its lease runs out and the reaper
        recovers it."""
        self._slots = asyncio.Semaphore(settings.concurrency)
        self._cancel_requested: set[uuid.UUID] = set()
        """Executions whose handlers were cancelled on request (not by the worker stopping)."""
        self._early_stops: OrderedDict[uuid.UUID, None] = OrderedDict()
        """Stop requests for executions whose handlers had not started (`EARLY_STOPS`)."""
        self._webhook = alerts.DeadWebhook(settings.dead_webhook)
        self._finishes = GroupCommits(self._finish_batch)
        self._starts = StartsFirst(settings.concurrency)
        self._following: dict[str, asyncio.Task[None]] = {}
        """By group: a heartbeat's look for executions whose shards moved (`_beat`)."""
        self.promises = Promises(self._routes, settings.identity)
        """This worker's promises to start what it claims ahead (`run` by the worker)."""

    def timeout_of(self, claimed: Claimed) -> timedelta | None:
        """How long the handler of `claimed` may run: its job's timeout, else its task's;
        None when neither bounds it (or the task is unknown)."""
        if claimed.timeout_seconds:
            return timedelta(seconds=claimed.timeout_seconds)
        definition = self._tasks.get(claimed.task)
        return definition.timeout if definition and definition.timeout else None

    async def run(self, body: ExecutionMessage, claim: Claim) -> None:
        """Run `body`: claimed at once when it arrived ahead of its due time (`claim`; its
        lease runs from the due time, and no handler slot is held meanwhile), else once due
        and within the concurrency limit; its handler started once due by Postgres's clock;
        its outcome recorded with when the handler began. Raises what the claim raised;
        cancelled, records nothing."""
        claimed: Claimed | None = None
        if self._ahead(body):
            answer = await claim()
            if answer is None:
                return
            if isinstance(answer, Claimed):
                claimed = answer
                self._held[claimed.id] = claimed.shard
                self._leased[claimed.id] = claimed.lease_until
        try:
            if claimed is None:
                await self._until_due(body)
            elif not await self._startable(claimed):
                return
            # A slot is a running handler: the outcome's write happens after it is given back
            # (the message stays unacked until then, so prefetch still bounds the backlog).
            self._starts.queued()
            try:
                await self._slots.acquire()
            finally:
                self._starts.dequeued()
            try:
                ran = await self._claim_and_run(body, claim, claimed)
            finally:
                self._slots.release()
        finally:
            if claimed is not None:
                self._leased.pop(claimed.id, None)
        if ran is not None:
            try:
                await self._starts.gone()
                await self._record(body, *ran)
            finally:
                self._held.pop(ran[0].id, None)

    async def _startable(self, claimed: Claimed) -> bool:
        """Once an execution claimed ahead is due, whether it may go on to wait for a slot:
        not handed back by `stop_handlers`, its lease (as this worker knows it) not run out,
        and still this worker's: a promise reached its due time in time (`_fallen_due`), or
        else `_still_ours`."""
        how = await self._fallen_due(self._routes.group_of(claimed.shard), claimed.due_at)
        if self._stopping:
            return False  # handed back by `stop_handlers`, never started here
        leased = self._leased[claimed.id]
        if await self._lease_lost(claimed, leased):
            return False
        if how is not None:
            metrics.claims_ahead_checked.labels(how).inc()
            return True
        return await self._still_ours(claimed, leased)

    async def _fallen_due(self, group: str, due_at: datetime) -> str | None:
        """Wait until `due_at` by Postgres's clock, then for a promise in `group` reaching it
        (`Promises.covered`: how, or None when none did in time). The executions claimed
        ahead and due at one instant share the one wait: in a burst of 10,000 due at once, one
        timer and one look wake them all, rather than each waking twice on its own (0.14-0.27 s
        of a worker's loop a time, before the first handler started: docs/performance.md)."""
        key = (group, due_at)
        shared = self._due.get(key)
        if shared is None:
            shared = self._due[key] = asyncio.ensure_future(self._due_and_promised(group, due_at))
            shared.add_done_callback(lambda _: self._due.pop(key, None))
        return await asyncio.shield(shared)  # one waiter cancelled leaves the others' wait

    async def _due_and_promised(self, group: str, due_at: datetime) -> str | None:
        await self._until(due_at)
        return await self.promises.covered(group, due_at)

    async def _lease_lost(self, claimed: Claimed, leased: datetime) -> bool:
        """Whether less than `LEASE_MARGIN` of the lease of `claimed` is left (`leased`: when
        it ends as this worker knows it): this worker stood still since it looked (frozen,
        its loop stalled), and the reaper may have given the execution to another worker or
        ended the attempt. If so it is given back, never started here."""
        if self._clock.now() <= leased - LEASE_MARGIN:
            return False
        await self._give_back(claimed)
        return True

    async def _still_ours(self, claimed: Claimed, leased: datetime) -> bool:
        """Whether this worker may start an execution it claimed ahead, now due, that no
        promise of its reached in time: a new one finds the claim still its own. If not, the
        reaper gave it back while this worker stood still: it runs elsewhere. A store out of
        reach is asked again while the lease lasts."""
        mine = bool(
            await while_leased(
                lambda: self.promises.confirm(claimed.shard, claimed.id, claimed.due_at),
                lambda: self._clock.now() > leased - LEASE_MARGIN,
                "execution %s: not confirmed",
                claimed.id,
            )
        )
        if not mine:
            self._held.pop(claimed.id, None)
            log.warning("execution %s: given back while this worker stood still (it runs "
                        "elsewhere); not started here", claimed.id)  # fmt: skip
        return mine

    async def _give_back(self, claimed: Claimed) -> None:
        """Give back an execution claimed (ahead, or once due) whose handler never started
        (`scheduled`, due as it was, not an attempt), if still held: best effort; else its
        lease runs out and the reaper does it."""
        self._held.pop(claimed.id, None)
        log.warning("execution %s: its lease may have run out before its handler started; "
                    "given back", claimed.id)  # fmt: skip
        try:
            await self._routes.follow(
                claimed.shard,
                lambda group: self._release(group, claimed.id),
                lambda released: released > 0,
            )
        except Exception:
            log.exception("execution %s: not given back; its lease will run out", claimed.id)

    async def _release(self, group: str, execution_id: uuid.UUID) -> int:
        async with self._routes.database(group).acquire() as conn:
            return await store.release_running(
                conn, owner=self._cfg.identity, ids=[execution_id], now=self._clock.now()
            )

    def _ahead(self, body: ExecutionMessage) -> bool:
        """Whether `body` arrived before its due time, within `HOLD_LIMIT` of it."""
        early = (body.due_at - self._clock.now()).total_seconds()
        return 0 < early <= HOLD_LIMIT.total_seconds()

    async def _until_due(self, body: ExecutionMessage) -> None:
        """Hold an execution published ahead of its due time (the scheduler's dispatch lead),
        without a slot, until it is due by Postgres's clock: a handler never starts early,
        even when a scheduler's clock runs ahead. Its message stays unacked meanwhile.

        One due more than `HOLD_LIMIT` ahead was not published by a lead: it goes on at once
        (and a message no database can hold is dead-lettered by its claim, as before)."""
        early = (body.due_at - self._clock.now()).total_seconds()
        if early > HOLD_LIMIT.total_seconds():
            log.warning(
                "execution %s is due %.0f s from now, more than any dispatch lead: not held",
                body.execution_id,
                early,
            )
            return
        await self._until(body.due_at)

    async def _until(self, due_at: datetime) -> None:
        """Until `due_at` by Postgres's clock. The sleep runs on the event loop's clock: a
        heartbeat may re-measure the offset meanwhile, so look again before letting go."""
        early = (due_at - self._clock.now()).total_seconds()
        while early > 0:
            await asyncio.sleep(early)
            early = (due_at - self._clock.now()).total_seconds()

    async def _claim_and_run(
        self, body: ExecutionMessage, claim: Claim, claimed: Claimed | None
    ) -> tuple[Claimed, Outcome, datetime] | None:
        """Claim (unless `claimed` ahead) and run the handler: the execution, how it ended and
        when its handler began; None when there was nothing to run (throttled, duplicate or
        stale) or it was not started after all (handed back: the worker stopping, or too
        little of the lease left)."""
        leased: datetime
        if claimed is None:
            claimed = await self._claim_due(body, claim)
            if claimed is None:
                return None
            self._held[claimed.id] = claimed.shard
            leased = claimed.lease_until
        else:  # claimed ahead: its lease as the heartbeats kept it while it waited for a slot
            leased = self._leased.pop(claimed.id)
            if self._stopping:
                return None  # handed back by `stop_handlers`, never started here
        if await self._lease_lost(claimed, leased):  # since the claim, or the slot's wait
            return None
        began = self._clock.now()
        metrics.start_lag.observe((began - claimed.due_at).total_seconds())
        metrics.in_flight.inc()
        started = time.monotonic()
        try:
            return claimed, await self._attempt(claimed), began
        except BaseException:
            self._held.pop(claimed.id, None)
            raise
        finally:
            metrics.in_flight.dec()
            metrics.run_duration.observe(time.monotonic() - started)

    async def _claim_due(self, body: ExecutionMessage, claim: Claim) -> Claimed | None:
        """Claim `body`, due by this worker's clock. A claim that found it not yet due by the
        clock as re-measured meanwhile (`Early`) is tried again a moment later; given up
        after `EARLY_TRIES` (the row left `scheduled` for the reaper to publish again)."""
        for _ in range(EARLY_TRIES):
            answer = await claim()
            if not isinstance(answer, Early):
                return answer
            await asyncio.sleep(EARLY_RETRY)
        log.warning("execution %s: still not due by the claim's clock", body.execution_id)
        return None

    async def _attempt(self, claimed: Claimed) -> Outcome:
        """Run the handler of `claimed` and classify how it ended."""
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
        definition = self._tasks.get(claimed.task)
        error: BaseException | None
        returned: Any = None
        if definition is None:
            error = PermanentError(f"unknown task {claimed.task!r}: no handler registered")
        else:
            error, returned = await self._call(definition, ctx, claimed)
        if claimed.id in self._cancel_requested:
            self._cancel_requested.discard(claimed.id)
            ctx.logger.info("attempt %d cancelled on request", claimed.attempt)
            return Outcome(
                ExecutionStatus.CANCELLED,
                "cancel_requested",
                "cancelled while running: the job was cancelled or replaced",
            )
        outcome = classify(
            error,
            attempt=claimed.attempt,
            now=self._clock.now(),
            policy=lambda: RetryPolicy.model_validate(claimed.retry_policy),
        )
        ctx.logger.info("attempt %d ended %s", claimed.attempt, outcome.status)
        if outcome.status == ExecutionStatus.SUCCEEDED and returned is not None:
            result = stored_result(returned)
            if isinstance(result, dict) and RESULT_DROPPED_KEY in result and len(result) == 1:
                ctx.logger.warning("result not stored: %s", result[RESULT_DROPPED_KEY])
            outcome = replace(outcome, result=result)
        return outcome

    async def _call(
        self, definition: TaskDefinition, ctx: TaskContext, claimed: Claimed
    ) -> tuple[BaseException | None, Any]:
        """Run the handler under its timeout, `ctx` its current context; what it raised
        (None: it returned, or was cancelled on request) and what it returned. Cancelled
        otherwise (the worker itself is), raises `CancelledError`."""
        timeout = self.timeout_of(claimed)
        if claimed.id in self._early_stops:  # asked to stop before its handler started
            del self._early_stops[claimed.id]
            self._cancel_requested.add(claimed.id)
            return None, None
        with serving(ctx):
            try:
                coro: Awaitable[Any]
                if inspect.iscoroutinefunction(definition.handler):
                    coro = definition.handler(ctx, claimed.payload)
                else:  # plain functions run in the default thread pool (context copied)
                    coro = asyncio.to_thread(definition.handler, ctx, claimed.payload)
                handler = asyncio.ensure_future(
                    asyncio.wait_for(coro, timeout.total_seconds() if timeout else None)
                )
                self._handlers[claimed.id] = (claimed.shard, handler)
                returned = await handler
            except asyncio.CancelledError:
                if claimed.id not in self._cancel_requested:
                    raise  # the worker itself is being cancelled
                return None, None
            except Exception as exc:
                return exc, None
            finally:
                self._handlers.pop(claimed.id, None)
        return None, returned

    async def _record(
        self, body: ExecutionMessage, claimed: Claimed, outcome: Outcome, began: datetime
    ) -> None:
        """Write the outcome, and when the handler `began` (only if this claim still holds the
        execution); dead-letter and alert on a dead one."""
        if not await self._write(claimed, outcome, began):
            return
        if outcome.status == "dead":
            await self._report_dead(body, claimed, outcome)
        metrics.outcomes.labels(outcome.status.value).inc()
        if outcome.retry_at is not None:
            metrics.retries.inc()

    async def _write(self, claimed: Claimed, outcome: Outcome, began: datetime) -> bool:
        """Whether the outcome was recorded (in the group of its shard, or the group the shard
        moved to meanwhile): False when the claim no longer held the execution, or the write
        failed for as long as the lease lasts."""
        finish = store.Finish(
            claimed,
            outcome.status,
            outcome.error_kind,
            outcome.error_message,
            result=outcome.result,
            retry_at=outcome.retry_at,
            started_at=began,
        )
        # Postgres restarting or the connection cut: try again while the lease lasts (after
        # that the reaper has ended the attempt and the write would find nothing to record).
        give_up = time.monotonic() + self._cfg.lease.total_seconds()
        recorded = await while_leased(
            lambda: self._routes.follow(
                claimed.shard, lambda group: self._finishes.submit(group, finish), bool
            ),
            lambda: time.monotonic() > give_up,
            "execution %s: outcome not recorded",
            claimed.id,
        )
        return bool(recorded)

    async def _report_dead(
        self, body: ExecutionMessage, claimed: Claimed, outcome: Outcome
    ) -> None:
        """Copy a dead execution to the dead-letter queue and announce it to the webhook."""
        await self._publisher.dead_letter(
            body.model_dump_json().encode(),
            str(claimed.id),
            {"reason": outcome.error_message or ""},
        )
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

    async def _finish_batch(self, group: str, outcomes: Sequence[store.Finish]) -> list[bool]:
        async with self._routes.database(group).acquire() as conn:
            return await retrying(
                lambda: store.finish_many(
                    conn, outcomes, owner=self._cfg.identity, now=self._clock.now()
                )
            )

    async def heartbeat(self, stop: asyncio.Event) -> None:
        """Until `stop`: every lease/3, extend the leases of the executions held (one
        heartbeat per store group holding some), cancel the handlers of those whose job asked
        for it, and re-measure the clock (against the catalog's group, as every worker)."""
        period = self._cfg.lease.total_seconds() / 3
        while not stop.is_set():
            held = dict(self._held)
            by_group = sorted(self._routes.by_group(held).items())
            beats = [self._beat(group, ids, held) for group, ids in by_group]
            # One group out of reach must not let the leases held in the others lapse.
            for failed in await asyncio.gather(*beats, self._sync(), return_exceptions=True):
                if isinstance(failed, Exception):  # the loop outlives any one failure
                    log.error("heartbeat failed", exc_info=failed)
            try:
                await asyncio.wait_for(stop.wait(), timeout=period)
            except TimeoutError:
                pass

    async def _sync(self) -> None:
        async with self._routes.home.acquire() as conn:
            await self._clock.sync(conn)

    async def _beat(
        self, group: str, ids: list[uuid.UUID], shards: Mapping[uuid.UUID, int]
    ) -> None:
        """One group's heartbeat; the executions it did not extend that are still held are
        looked for where their shards went, if they moved (a lease copied by a move is
        extended in its new group at once). That look waits for a move in progress to
        commit, so it runs on its own (one per group at a time): the next heartbeats keep
        their period and extend everything else meanwhile."""
        beat = await self._extend(group, ids)
        self.stop(beat.cancel)
        missed = [i for i in ids if i not in beat.extended and i in self._held]
        if missed and group not in self._following:
            task = asyncio.create_task(self._follow_moved(group, missed, shards))
            self._following[group] = task
            task.add_done_callback(lambda _: self._following.pop(group, None))

    async def _follow_moved(
        self, group: str, missed: list[uuid.UUID], shards: Mapping[uuid.UUID, int]
    ) -> None:
        try:
            moved = await self._routes.moved_executions(group, missed, shards)
            for there, moved_ids in sorted(moved.items()):
                self.stop((await self._extend(there, moved_ids)).cancel)
        except Exception:  # the next heartbeat looks again
            log.warning("heartbeat: executions missed in %s not followed", group, exc_info=True)

    def stop(self, execution_ids: Iterable[uuid.UUID]) -> int:
        """Cancel the handlers of these executions, whose rows are marked `cancel_requested`
        (a heartbeat's answer, or the scheduler's message on the control queue): each ends
        `cancelled` (`cancel_requested`). One not running here is remembered a while, in
        case its claim's answer is still on its way or it was claimed ahead of its due time
        (it then ends `cancelled` without its handler starting). Returns how many handlers it
        cancelled."""
        stopped = 0
        for execution_id in execution_ids:
            running = self._handlers.get(execution_id)
            if running is not None:
                if not running[1].done():
                    self._cancel_requested.add(execution_id)
                    running[1].cancel()
                    stopped += 1
            else:  # not started yet: claimed ahead, or its claim's answer on its way
                self._early_stops[execution_id] = None
                while len(self._early_stops) > EARLY_STOPS:
                    self._early_stops.popitem(last=False)
        return stopped

    async def _extend(self, group: str, ids: list[uuid.UUID]) -> store.Beat:
        now = self._clock.now()
        async with self._routes.database(group).acquire() as conn:
            beat = await store.heartbeat(
                conn, owner=self._cfg.identity, now=now, lease=self._cfg.lease, ids=ids
            )
        for execution_id in beat.extended:
            if execution_id in self._leased:
                self._leased[execution_id] = max(self._leased[execution_id], now + self._cfg.lease)
        return beat

    async def stop_handlers(self) -> dict[uuid.UUID, int]:
        """Cancel the handlers still running (nothing is recorded for them) and give them
        `stop_wait` to end (a cancelled handler's `finally` may still clean up); the
        executions whose handlers have ended, which may now run elsewhere, with their shards,
        and those claimed ahead and not started, waiting for their due times or a slot (never
        started here from now on).
        One that has not ended keeps its lease until this process exits, and the reaper
        recovers it."""
        self._stopping = True
        waiting = {i: self._held[i] for i in self._leased if i in self._held}
        handlers = dict(self._handlers)
        for _, handler in handlers.values():
            handler.cancel()
        wait = self._cfg.stop_wait.total_seconds()
        if handlers:
            await asyncio.wait([h for _, h in handlers.values()], timeout=wait)
        ended = {i: shard for i, (shard, handler) in handlers.items() if handler.done()}
        if len(ended) < len(handlers):
            log.warning(
                "%d handlers still running %.0f s after being stopped: left to the reaper",
                len(handlers) - len(ended),
                wait,
            )
        return ended | waiting

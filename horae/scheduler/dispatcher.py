"""Preload owned shards' windows into a timer heap and publish each execution at its due moment,
or up to the dispatch lead before it, or the burst lead for a burst (workers claim an early
one as it arrives and start it once due).

Order of writes per batch, in one transaction fenced by the shards' epochs: the epochs
share-locked, then publish with confirms (the shards still ours only), then record skipped
occurrences, end replaced predecessors and schedule cron jobs' next occurrences. The
published rows themselves are not written: they stay `scheduled` until a worker claims
them, and this replica remembers what it published (`_published`) so that its re-reads of
the window do not publish them again; the reaper republishes those still unclaimed after
the redelivery timeout (`unclaimed`). A shard taken meanwhile (another replica, a move to
another store group) waits for the transaction; its new owner, which does not know what was
published, publishes the unclaimed ones again once (a duplicate message the worker's claim
drops). A crash between publish and commit leaves the rows as they were, so they are
published again, never lost. A shard fenced out (taken by another replica, or moved) is
dropped at once.
Each dispatcher works on one store group's database (`groups`).

Preload reads through the partial index with a cursor: each refresh reads only
rows beyond the last one seen; rows inserted behind the cursor (near-term
creates, retries) are announced by NOTIFY for their shard, which re-reads that
shard's window from them (only rows made since, when the NOTIFY tells when they were
made: `store.Notice`); a full re-read every `FULL_REFRESH_EVERY` is the safety net.

Memory is bounded whatever is due: a replica holds at most `max_rows` executions
(HORAE_PRELOAD_MAX_ROWS), the earliest by (due_at, id). The cursor read stops when the
heap is full and goes on as rows are dispatched; rows read behind the cursor while it is
full displace the latest held ones, and the cursor moves back to the last row kept, so
the displaced ones are read again when there is room.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import logging
import math
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from horae import metrics
from horae.batching import GroupCommit
from horae.broker import Publisher
from horae.clock import utc_now
from horae.config import MAX_DISPATCH_LEAD
from horae.scheduler.limits import TenantGate
from horae.scheduler.rounds import HOLD_EVERY, Plan, decide, guarded, message
from horae.store import dispatch as store
from horae.store.db import Database
from horae.store.dispatch import MIN_CURSOR, Due, Notice, Recorded, ShardDispatch
from horae.store.groups import MAIN

if TYPE_CHECKING:
    from horae.store.db import Conn

log = logging.getLogger(__name__)

PRELOAD_PAGE = 20_000
"""Rows per read (at most `max_rows`): what a read holds beyond the heap, transiently."""
BATCH_LIMIT = 2_000
FULL_REFRESH_EVERY = 30.0
"""Seconds between full re-reads of the window (the safety net under the cursor)."""
FULL_LOOKBACK = timedelta(days=1)
"""A full re-read starts this far back, so the partitions of older days are pruned..."""
STOP_TIMEOUT = 1.0
"""Seconds the dispatch loop waits for the broker to take a stop message (best-effort)."""
BURST_BIN = 0.25
"""Seconds: executions due within one such slice of time (on this replica's shards of a
group) count together towards a burst."""
BURST_CLAIMS_PER_SECOND = 10_000
"""A burst's lead is at least its size over this many claims a second (about what two
workers on two cores claim ahead), so a larger burst is published, and claimed, earlier."""
MOST_LEAD = timedelta(seconds=MAX_DISPATCH_LEAD)
DEEP_REFRESH_EVERY = 600.0
"""...except every this many seconds (and after gaining a shard), when it reads all history
for executions overdue since longer ago (e.g. after a long outage)."""


def _bin(at: datetime) -> int:
    """The slice of time (`BURST_BIN`) `at` falls in."""
    return math.floor(at.timestamp() / BURST_BIN)


def _order(entry: tuple[datetime, int, Due]) -> tuple[datetime, int]:
    """The preload cursor's order, (due_at, id), of a heap entry."""
    return entry[2].due_at, entry[2].id.int


class Dispatcher:
    """Holds the preload window of every owned shard and dispatches it on time."""

    def __init__(
        self,
        pool: Database,
        publisher: Publisher,
        *,
        identity: str,
        window: timedelta,
        refresh_period: timedelta,
        lease_valid: Callable[[int], bool],
        on_fenced: Callable[[int], Awaitable[None]],
        lead: timedelta = timedelta(),
        burst_lead: timedelta = timedelta(),
        burst_size: int = 1_000,
        interval: timedelta = timedelta(),
        max_rows: int = 100_000,
        group: str = MAIN,
    ) -> None:
        self._pool = pool
        self.group = group
        """The store group whose shards this dispatcher holds (metrics' `group` label)."""
        self._publisher = publisher
        self._identity = identity
        self._window = window
        self._refresh_period = refresh_period.total_seconds()
        self._lease_valid = lease_valid
        self._on_fenced = on_fenced
        self._lead = lead
        self._burst_lead = burst_lead
        self._burst_size = burst_size
        self._first_look = max(lead, MOST_LEAD) if burst_lead else lead
        """How long before its due time an execution is first looked at (its heap key when
        added): the longest lead it may get. Then it is published, or put back at its own
        lead (`_later`)."""
        self._bins: Counter[int] = Counter()
        """Executions added per `BURST_BIN` of due time (a row read twice counts twice)."""
        self._interval = interval.total_seconds()
        """The shortest time between the starts of two rounds (HORAE_DISPATCH_INTERVAL_SECONDS)."""
        self._max_rows = max_rows
        self._page = min(PRELOAD_PAGE, max_rows)
        self.peak = 0
        """The most executions held at once (never more than `max_rows`)."""
        self._capped = False
        """The last read beyond the cursor stopped for want of room: read on after dispatch."""
        self.epochs: dict[int, int] = {}
        self._heap: list[tuple[datetime, int, Due]] = []
        """(when to publish or look again, a number no other entry has, execution): its due
        time, less the longest lead it may get unless `guarded`. Entries due at the same
        moment go in the order they were pushed; executions are never compared (they have no
        order: two entries of one execution at one moment made `heappop` raise, which ended
        the dispatch loop)."""
        self._seq = itertools.count()
        self._known: set[tuple[uuid.UUID, datetime]] = set()
        """(id, due_at) of the executions in the heap or being dispatched. A row put back
        under its id (throttled, handed back) is due at a new moment, so it is a new key: a
        re-read loads it even before the dispatch of its old one has finished."""
        self._cursor = MIN_CURSOR
        self._last_full = 0.0
        self._last_deep = 0.0
        self._full_needed = True
        self._gained: set[int] = set()
        """Shards taken since the last refresh: their whole windows are read there, overdue
        rows of any age included (the shared cursor has already moved past rows of shards
        we did not own when it read them)."""
        self._takes: GroupCommit[int, int] = GroupCommit(self._take, isolate=True)
        """Epochs taken together: a shard busy or moved fails only its own gain."""
        self._notified: dict[int, Notice | None] = {}
        """Shards told of new rows: where they are, None = re-read the window."""
        self._wake = asyncio.Event()
        self._refresh_now = asyncio.Event()
        self._gate = TenantGate()
        self._published: dict[int, dict[tuple[uuid.UUID, datetime], tuple[float, bool]]] = {}
        """Per owned shard, (id, due_at) -> (monotonic time of its last publish, looked up
        since) of the executions this replica published and has not yet seen claimed
        (`unclaimed`). Dropped with the shard: its next owner publishes those again."""
        self._buffered: dict[tuple[uuid.UUID, datetime], datetime] = {}
        """BufferOne executions held behind a running one (in the heap, still `scheduled`)
        whose next occurrence is scheduled already, with when each is looked at again."""

    def published(self) -> set[tuple[uuid.UUID, datetime]]:
        """(id, due_at) of what this replica published and has not yet seen claimed."""
        return {key for keys in self._published.values() for key in keys}

    def held(self) -> list[Due]:
        """The executions waiting in the timer heap, soonest first."""
        return [entry[2] for entry in sorted(self._heap)]

    # -- ownership -----------------------------------------------------------
    async def gain(self, shard: int) -> None:
        """Take the shard's epoch (with the other shards being gained meanwhile, in one
        transaction); the refresh loop, woken, reads its window (with theirs, in one read).
        A failover gains a crashed replica's shards at once, where a transaction and a read
        for each of them competed for the pool (docs/performance.md, Coordination)."""
        self.epochs[shard] = await self._takes.submit(shard)
        self._gained.add(shard)
        self._refresh_now.set()
        metrics.report_owned(self.group, len(self.epochs))

    async def _take(self, shards: Sequence[int]) -> list[int]:
        async with self._pool.acquire() as conn:
            epochs = await store.take_shards(conn, shards, self._identity, utc_now())
        return [epochs[s] for s in shards]

    async def lose(self, shard: int) -> None:
        self.epochs.pop(shard, None)
        self._gained.discard(shard)
        self._published.pop(shard, None)
        metrics.report_owned(self.group, len(self.epochs))

    async def unclaimed(
        self, conn: Conn, now: datetime, redelivery: timedelta, *, check_after: timedelta
    ) -> list[Due]:
        """What this replica published that is still unclaimed after `redelivery` (counted
        from the later of its publish and its due time), for the reaper to publish again.
        Each published execution is looked up once `check_after` past both instants (most
        have been claimed by then, and are forgotten), and those still unclaimed once more
        after `redelivery`: so a backlog the workers have not reached yet costs two look-ups
        per execution, not one every pass."""
        clock = time.monotonic()

        def due_for_a_look(key: tuple[uuid.UUID, datetime], at: float, looked: bool) -> bool:
            wait = redelivery if looked else check_after
            return clock - at >= wait.total_seconds() and now - key[1] >= wait

        looked = [
            (*key, shard)
            for shard, keys in self._published.items()
            for key, (at, seen) in keys.items()
            if due_for_a_look(key, at, seen)
        ]
        if not looked:
            return []
        waiting = {(d.id, d.due_at): d for d in await store.still_scheduled(conn, looked)}
        again: list[Due] = []
        for id_, due_at, shard in looked:
            keys = self._published.get(shard, {})  # (the shard may be gone meanwhile)
            key = (id_, due_at)
            sent = keys.get(key)
            if sent is None:
                continue
            d = waiting.get(key)
            if d is None:
                del keys[key]  # claimed (or ended) meanwhile
            elif due_for_a_look(key, sent[0], True):
                again.append(d)
            else:
                keys[key] = (sent[0], True)
        return again

    def republished(self, dues: Sequence[Due]) -> None:
        """`dues` were published again now (the reaper): their redelivery timeout restarts."""
        clock = time.monotonic()
        for d in dues:
            keys = self._published.get(d.shard, {})
            if (d.id, d.due_at) in keys:
                keys[d.id, d.due_at] = (clock, True)

    def resize(self, max_rows: int) -> None:
        """Hold at most `max_rows` from now on (a replica's cap is split over its groups, and
        a group was added): a heap above it is trimmed at once."""
        self._max_rows = max(1, max_rows)
        self._page = min(PRELOAD_PAGE, self._max_rows)
        if len(self._heap) > self._max_rows:
            self._trim()
            self._report_size()

    def reload(self) -> None:
        """Re-read the whole window (after the LISTEN connection came back)."""
        self._full_needed = True
        self._refresh_now.set()

    def notified(self, _conn: object, _pid: int, channel: str, payload: object) -> None:
        """Near-term executions were inserted for one of our shards: read them now."""
        try:
            shard = int(channel.rsplit("_", 1)[1])
        except ValueError:
            self._full_needed = True
        else:
            notice = store.parse_notify(str(payload))
            known = self._notified.get(shard, notice)
            self._notified[shard] = (
                None if notice is None or known is None else notice.merged(known)
            )
        self._refresh_now.set()

    # -- preload -------------------------------------------------------------
    def _add(self, rows: Sequence[Due]) -> int:
        added = 0
        for due in rows:
            key = (due.id, due.due_at)
            published = self._published.get(due.shard, ())
            if key not in self._known and key not in published and due.shard in self.epochs:
                self._known.add(key)
                if not guarded(due):
                    self._bins[_bin(due.due_at)] += 1
                heapq.heappush(self._heap, (self._publish_at(due), next(self._seq), due))
                added += 1
        if len(self._heap) > self._max_rows:
            self._trim()
        if added:
            self._wake.set()
        self._report_size()
        return added

    def _report_size(self) -> None:
        self.peak = max(self.peak, len(self._heap))
        metrics.report_preload(self.group, len(self._heap), self.peak)

    def _trim(self) -> None:
        """Keep the `max_rows` earliest (due_at, id) and forget the others; the cursor
        moves back to the last row kept, so they are read again once there is room."""

        excess = len(self._heap) - self._max_rows
        dropped = {(e[2].id, e[2].due_at) for e in heapq.nlargest(excess, self._heap, key=_order)}
        self._heap = [e for e in self._heap if (e[2].id, e[2].due_at) not in dropped]
        heapq.heapify(self._heap)
        self._known -= dropped
        for key in dropped:
            self._buffered.pop(key, None)
        last = max(self._heap, key=_order)[2]
        self._cursor = min(self._cursor, (last.due_at, last.id))
        self._capped = True

    def _publish_at(self, d: Due) -> datetime:
        return d.due_at if guarded(d) else d.due_at - self._first_look

    def _lead_of(self, d: Due) -> timedelta:
        """How long before its due time `d` is published: none when `guarded`; the burst
        lead (longer for a larger burst) when `burst_size` or more are due in its slice of
        time; else the dispatch lead."""
        if guarded(d):
            return timedelta()
        if self._burst_lead:
            size = self._bins[_bin(d.due_at)]
            if size >= self._burst_size:
                ahead = max(self._burst_lead, timedelta(seconds=size / BURST_CLAIMS_PER_SECOND))
                return max(self._lead, min(ahead, MOST_LEAD))
        return self._lead

    def _later(self, entry: tuple[datetime, int, Due], now: datetime) -> datetime | None:
        """When an entry taken off the heap at `now` is to be published, if later than that
        (its own lead is shorter than the one it was first looked at by); else None."""
        at = entry[2].due_at - self._lead_of(entry[2])
        return at if at > now and at > entry[0] else None

    def _defer(self, now: datetime) -> None:
        """Put the heap's first entries that are not to be published yet back at their own
        publish time, so that a round only starts when something is to be published."""
        while self._heap and self._heap[0][0] <= now:
            later = self._later(self._heap[0], now)
            if later is None:
                return
            _, n, d = heapq.heappop(self._heap)
            heapq.heappush(self._heap, (later, n, d))

    def _prune_bins(self) -> None:
        """Forget the burst counts of slices long past."""
        past = _bin(utc_now() - FULL_LOOKBACK)
        if self._bins and min(self._bins) < past:
            for b in [b for b in self._bins if b < past]:
                del self._bins[b]

    async def _read(
        self,
        shards: list[int],
        until: datetime,
        after: tuple[datetime, uuid.UUID],
        *,
        why: str,
        advance: bool = False,
        made_since: uuid.UUID | None = None,
    ) -> int:
        """Read `shards`' rows from `after` up to the cursor (with `made_since`, only those
        whose ids are not smaller); with `advance` (every owned shard), on beyond it while
        the heap has room, moving the cursor along. `why`: the read's label in
        `horae_preload_rows_read_total`."""
        total = 0
        counted = metrics.preload_read.labels(why)
        async with self._pool.acquire() as conn:
            while True:
                if after >= self._cursor:
                    if not advance:
                        return total
                    if len(self._heap) >= self._max_rows:
                        self._capped = True
                        return total
                rows = await store.preload(conn, shards, until, self._page, after, made_since)
                counted.inc(len(rows))
                if rows:
                    after = (rows[-1].due_at, rows[-1].id)
                    if advance:
                        self._cursor = max(self._cursor, after)
                total += self._add(rows)  # which may move the cursor back (a trim)
                if len(rows) < self._page:
                    if advance:
                        self._capped = False
                    return total

    async def refresh(self) -> int:
        shards = sorted(self.epochs)
        if not shards:
            return 0
        until = utc_now() + self._window
        added = 0
        gained = sorted(self._gained.intersection(shards))
        if gained:  # (kept for the next refresh if this read fails)
            added += await self._read(gained, until, MIN_CURSOR, why="gained")
            self._gained.difference_update(gained)
        if self._full_needed or time.monotonic() - self._last_full > FULL_REFRESH_EVERY:
            self._full_needed = False
            self._notified.clear()
            self._last_full = time.monotonic()
            self._prune_bins()
            start = (utc_now() - FULL_LOOKBACK, MIN_CURSOR[1])
            if time.monotonic() - self._last_deep > DEEP_REFRESH_EVERY:
                self._last_deep = time.monotonic()
                start = MIN_CURSOR
            return added + await self._read(
                shards, until, min(start, self._cursor), why="window", advance=True
            )
        # New rows ahead of the cursor are read by the cursor's read below; only those that
        # sorted behind it are read again, from the smallest of them, and of the rows from
        # there to the cursor only those made since (the known ones between are not read
        # again: creates of a second, committed in any order, fall behind each other's);
        # rows put back under their old ids mean a re-read of the shard.
        notified, self._notified = self._notified, {}
        owned = set(shards)
        whole = sorted(s for s, n in notified.items() if n is None and s in owned)
        behind = {
            s: n
            for s, n in notified.items()
            if n is not None and s in owned and n.key <= self._cursor
        }
        if whole:
            lookback = (utc_now() - FULL_LOOKBACK, MIN_CURSOR[1])
            added += await self._read(whole, until, lookback, why="notified")
        if behind:
            notice = functools.reduce(Notice.merged, behind.values())
            due_at, first = notice.key
            start = (due_at, uuid.UUID(int=max(0, first.int - 1)))  # from `first` inclusive
            added += await self._read(
                sorted(behind), until, start, why="notified", made_since=notice.made
            )
        more = await self._read(shards, until, self._cursor, why="window", advance=True)
        log.debug(
            "refresh: %d shards re-read whole and %d from a key on NOTIFY, %d new",
            len(whole),
            len(behind),
            added + more,
        )
        return added + more

    async def run_refresh(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self._refresh_now.clear()
            try:
                await self.refresh()
            except Exception:  # the loop must outlive any one failure
                log.exception("preload failed; retrying")
                self._full_needed = True
                await asyncio.sleep(0.5)
            try:
                await asyncio.wait_for(self._refresh_now.wait(), timeout=self._refresh_period)
            except TimeoutError:
                pass
            await asyncio.sleep(0.02)  # coalesce bursts of NOTIFY

    # -- dispatch ------------------------------------------------------------
    async def run_dispatch(self, stop: asyncio.Event) -> None:
        last_round, full = -math.inf, False
        while not stop.is_set():
            self._wake.clear()
            self._defer(utc_now())
            if self._heap and self._heap[0][0] <= utc_now():
                # Something is due: no sooner than the interval after the last round, so what
                # falls due meanwhile goes out with it, in fuller messages (a backlog, which
                # fills rounds, goes out round after round).
                rest = last_round + self._interval - time.monotonic()
                if rest > 0 and not full:
                    await asyncio.sleep(rest)
                last_round = time.monotonic()
            now = utc_now()
            batch: list[Due] = []
            deferred: list[tuple[datetime, int, Due]] = []
            while self._heap and self._heap[0][0] <= now and len(batch) < BATCH_LIMIT:
                entry = heapq.heappop(self._heap)
                later = self._later(entry, now)
                if later is None:
                    batch.append(entry[2])
                else:
                    deferred.append((later, entry[1], entry[2]))
            for entry in deferred:
                heapq.heappush(self._heap, entry)
            full = len(batch) >= BATCH_LIMIT
            if batch:
                try:
                    await self._dispatch(batch)  # (which forgets what it does not put back)
                except Exception:  # the loop must outlive any one failure
                    log.exception("dispatch failed; the batch stays scheduled and is re-read")
                    self._full_needed = True
                    await asyncio.sleep(0.5)
                self._report_size()
                if self._capped:  # room again: read on beyond the cursor
                    self._refresh_now.set()
                continue
            delay = (self._heap[0][0] - now).total_seconds() if self._heap else 1.0
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=min(max(delay, 0.0), 1.0))
            except TimeoutError:
                pass

    def _hold_back(self, wait: Sequence[tuple[Due, datetime]]) -> None:
        """Executions whose tenant runs its `max_running`: back into the heap, unpublished,
        to be looked at again when given (see `limits`)."""
        for d, again in wait:
            heapq.heappush(self._heap, (again, next(self._seq), d))
        metrics.held_back.inc(len(wait))
        self._wake.set()

    def _hold_buffered(self, held: Sequence[Due], now: datetime) -> None:
        """BufferOne executions left waiting: back into the heap, still `scheduled` (a new
        owner of the shard reads them again), to be looked at again `HOLD_EVERY` later."""
        again = now + HOLD_EVERY
        for d in held:
            heapq.heappush(self._heap, (again, next(self._seq), d))
            if (d.id, d.due_at) in self._buffered:
                self._buffered[d.id, d.due_at] = again
        if held:
            self._wake.set()

    def _forget(self, dues: Sequence[Due]) -> None:
        for d in dues:
            self._known.discard((d.id, d.due_at))
            self._buffered.pop((d.id, d.due_at), None)

    async def _dispatch(self, batch: list[Due]) -> None:
        """Publish `batch` (taken off the heap) as one round. Every execution of it is
        forgotten (`_known`: a re-read loads it again if it is still to be dispatched),
        however the round ends, but those `_plan` put back into the heap."""
        now = utc_now()
        try:
            ours = self._ours(batch)  # (forgets those not ours)
            if not ours:
                return
            plans, batch = await self._plan(batch, ours, now)
        except Exception:
            self._forget(batch)  # nothing was put back: re-read, as the rest of the round
            raise
        epochs = {shard: self.epochs[shard] for shard in plans if shard in self.epochs}
        try:
            rounds, recorded, took = await self._record_and_publish(plans, epochs)
        except Exception:
            log.exception("dispatch failed; the batch stays scheduled and is re-read")
            self._forget(batch)
            self._full_needed = True
            await asyncio.sleep(0.5)
            return
        self._forget(batch)
        sent = time.monotonic()
        for shard, plan in rounds.items():
            if shard not in self.epochs:
                continue  # lost while the round ran: its next owner publishes again
            keys = self._published.setdefault(shard, {})
            for d in plan.published:
                keys[d.id, d.due_at] = (sent, False)
        await self._settle(set(plans) - set(rounds), rounds)
        for plan in rounds.values():
            for d in plan.held:
                self._buffered.setdefault((d.id, d.due_at), now + HOLD_EVERY)
        log.debug(
            "dispatched %d (%d recorded): publish %.3fs, record %.3fs",
            sum(len(r.published) for r in rounds.values()),
            recorded,
            *took,
        )

    async def _record_and_publish(
        self, plans: dict[int, Plan], epochs: dict[int, int]
    ) -> tuple[dict[int, ShardDispatch], int, tuple[float, float]]:
        """Record the plans of the shards still ours in one fenced transaction
        (`store.fenced`: a shard taken meanwhile, by another replica or by a move to
        another store group, waits for it, so its next owner reads what this round decided:
        skips, ended predecessors, next occurrences), then, once it is committed, publish
        them. So a worker claiming a cron job's execution finds its next occurrence
        scheduled already, and never waits for this round's transaction to learn whether
        it must schedule it itself (it did before: claims waited on rounds, and the two
        batched inserts deadlocked). A crash or a failed publish after the commit leaves
        the rows `scheduled` and unpublished: they are read and published again (their
        record is idempotent); a shard taken between the commit and the publish is
        published by both owners (a duplicate message, which the claim drops).
        (The rounds recorded, executions published, (publish, record) seconds.)"""
        started = time.monotonic()
        async with self._pool.acquire() as conn, store.fenced(conn, epochs) as held:
            rounds = {s: self._round(epochs[s], plans[s]) for s in sorted(held)}
            recorded = await store.record_round(conn, rounds, utc_now())
        record_took = time.monotonic() - started
        metrics.dispatch_record.labels(self.group).observe(record_took)
        to_publish = [d for plan in rounds.values() for d in plan.published]
        if to_publish:
            await self._publisher.publish_batch([message(d) for d in to_publish])
        published = utc_now()
        for d in to_publish:
            # A BufferOne execution that waited is late by its wait: from its last look.
            since = self._buffered.get((d.id, d.due_at), d.due_at - self._lead_of(d))
            metrics.dispatch_lag.observe((published - since).total_seconds())
        publish_took = time.monotonic() - started - record_took
        await self._stop_replaced(recorded)
        return rounds, recorded.published, (publish_took, record_took)

    def _round(self, epoch: int, plan: Plan) -> ShardDispatch:
        """What to record of a shard's `plan`: the held executions whose next occurrence is
        not scheduled yet (first held) schedule it."""
        held = [d for d in plan.held if (d.id, d.due_at) not in self._buffered]
        return ShardDispatch(epoch, plan.publish, plan.skip, plan.cancel, held)

    async def _stop_replaced(self, recorded: Recorded) -> None:
        """Once the round is committed, tell each worker running a replaced execution to
        stop it now. Best-effort: one not told (the broker unreachable, the worker gone)
        finds the mark at its next heartbeat, and the reaper ends the execution of a
        worker that died as cancelled."""
        for worker, ids in sorted(recorded.stop.items()):
            try:
                async with asyncio.timeout(STOP_TIMEOUT):  # never holds up dispatch long
                    await self._publisher.cancel_running(worker, ids)
            except Exception:  # the round is recorded; the heartbeat is the fallback
                log.warning("could not tell worker %s to stop %d replaced executions",
                            worker, len(ids), exc_info=True)  # fmt: skip

    def _ours(self, batch: list[Due]) -> list[Due]:
        """What of `batch` this replica may dispatch: executions of shards it holds and
        renewed within the lease duration by its own clock. The others are forgotten; a
        held shard whose Lease lapsed is re-read at the next refresh."""
        ours: list[Due] = []
        lapsed: set[int] = set()
        for due in batch:
            if due.shard in self.epochs and self._lease_valid(due.shard):
                ours.append(due)
            else:
                self._known.discard((due.id, due.due_at))  # not ours (any more): forget it
                self._buffered.pop((due.id, due.due_at), None)
                if due.shard in self.epochs:
                    lapsed.add(due.shard)
        if lapsed:  # held, but not renewed within the lease duration by our clock
            log.warning(
                "not dispatching for shards %s: their Leases were not renewed in time",
                sorted(lapsed),
            )
            for shard in lapsed:  # re-read at the next refresh, not the next full one
                self._notified[shard] = None
        return ours

    async def _plan(
        self, batch: list[Due], ours: list[Due], now: datetime
    ) -> tuple[dict[int, Plan], list[Due]]:
        """Each shard's plan for `ours` (`rounds.decide`), once the tenant gate admitted them;
        those it holds back, and the BufferOne executions held behind a running one, go back
        to the heap and leave `batch` (returned). They go back only once every read has
        succeeded: a failed plan leaves the heap as it was (the whole batch is re-read)."""
        plans: dict[int, Plan] = {}
        async with self._pool.acquire() as conn:
            go, wait = await self._gate.admit(conn, ours, now)
            by_shard: dict[int, list[Due]] = defaultdict(list)
            for d in go:
                by_shard[d.shard].append(d)
            for shard, dues in by_shard.items():
                plans[shard] = await decide(
                    conn,
                    dues,
                    now,
                    waiting=self._buffered.keys(),
                    published=self._published.get(shard, {}),
                )
        if wait:
            self._hold_back(wait)
            waiting = {(d.id, d.due_at) for d, _ in wait}
            batch = [d for d in batch if (d.id, d.due_at) not in waiting]
        held = [d for plan in plans.values() for d in plan.held]
        if held:
            self._hold_buffered(held, now)
            kept = {d.id for d in held}
            batch = [d for d in batch if d.id not in kept]
        return plans, batch

    async def _settle(self, fenced: set[int], rounds: dict[int, ShardDispatch]) -> None:
        """After the record: drop the shards fenced out (another replica took them) or lost
        while the batch was planned; count what the others dispatched and skipped."""
        for shard in sorted(fenced):
            log.warning("fenced out of shard %d; dropping it", shard, extra={"shard": shard})
            metrics.fenced_writes.inc()
            self.epochs.pop(shard, None)
            self._published.pop(shard, None)
            await self._on_fenced(shard)
        for shard, plan in rounds.items():
            if shard not in fenced:
                metrics.dispatched.inc(len(plan.published))
                metrics.group_dispatched.labels(self.group).inc(len(plan.published))
                for s in plan.skipped:
                    metrics.skipped.labels(s.kind).inc()

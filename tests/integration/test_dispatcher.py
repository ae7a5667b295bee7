"""The dispatcher's preload and the reaper's redelivery against real Postgres and RabbitMQ
(no Kubernetes needed)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from prometheus_client import REGISTRY

from horae import broker
from horae.models import ConcurrencyPolicy, ExecutionBatch, JobSource, JobSpec
from horae.scheduler.dispatcher import Dispatcher
from horae.scheduler.groups import take_shard
from horae.scheduler.leases import NotYet
from horae.scheduler.listener import ShardListener
from horae.scheduler.reaper import Reaper
from horae.store import dispatch, jobs, tenants
from horae.store.db import Database, connect
from horae.store.executions import Claimed
from tests.support import transitions
from tests.support.groups import job_in
from tests.support.scheduling import HeldWatch, messages
from tests.support.wait import until

# One group's dispatcher on its database (a dispatcher per group: test_scheduler_groups).
pytestmark = pytest.mark.one_group


def dispatcher(
    pool: asyncpg.Pool, publisher: broker.Publisher, lease_valid: Callable[[int], bool],
    lead: timedelta = timedelta(), interval: timedelta = timedelta(), **burst: Any,
) -> Dispatcher:  # fmt: skip
    """A dispatcher that is never fenced out, its leases valid while `lease_valid` says."""

    async def never_fenced(shard: int) -> None:
        raise AssertionError(f"fenced out of {shard}")

    return Dispatcher(Database(pool), publisher, identity="d", window=timedelta(seconds=60),
                      refresh_period=timedelta(seconds=2), lease_valid=lease_valid,
                      on_fenced=never_fenced, lead=lead, interval=interval, **burst)  # fmt: skip


@pytest_asyncio.fixture
async def d(pool: asyncpg.Pool, publisher: broker.Publisher) -> Dispatcher:
    """A dispatcher whose leases always hold."""
    return dispatcher(pool, publisher, lambda s: True)


async def job_in_shard(
    pool: asyncpg.Pool, shard: int, due: datetime, below: uuid.UUID | None = None,
    policy: ConcurrencyPolicy = ConcurrencyPolicy.ALLOW,
) -> uuid.UUID:  # fmt: skip
    job_id = job_in(shard, below=below)
    spec = JobSpec(task="t", run_at=due, concurrency_policy=policy)
    async with pool.acquire() as conn:
        await jobs.create_job(conn, spec, tenant="t",
                              source=JobSource.API, shards=64, now=datetime.now(UTC),
                              job_id=job_id)  # fmt: skip
    return job_id


async def test_a_shard_taken_later_loads_rows_the_cursor_already_passed(
    pool: asyncpg.Pool, d: Dispatcher
) -> None:
    due = (datetime.now(UTC) + timedelta(seconds=30)).replace(microsecond=0)
    early = await job_in_shard(pool, 1, due)
    late = await job_in_shard(pool, 2, due, below=early)  # sorts before shard 1's row
    await d.gain(1)
    await d.refresh()  # the cursor now stands at (due, <shard 1's row>)
    await d.gain(2)  # shard 2's row may sort before the cursor: it must be loaded anyway
    await d.refresh()
    held = {due.job_id for due in d.held()}
    assert held == {early, late}


async def test_a_notified_row_behind_the_cursor_is_read_and_one_ahead_needs_no_reread(
    pool: asyncpg.Pool, d: Dispatcher, db_url: str
) -> None:
    heard: list[tuple[str, str]] = []
    listener = await connect(db_url)
    await listener.add_listener("horae_shard_1", lambda *a: heard.append((a[2], a[3])))
    try:
        due = (datetime.now(UTC) + timedelta(seconds=40)).replace(microsecond=0)
        first = await job_in_shard(pool, 1, due)
        await d.gain(1)
        await d.refresh()  # full: the cursor now stands at (due, <first's execution>)
        ahead = await job_in_shard(pool, 1, due + timedelta(seconds=5))
        behind = await job_in_shard(pool, 1, due - timedelta(seconds=10))

        async def all_heard() -> bool:  # NOTIFY arrives after COMMIT, asynchronously
            return len(heard) == 3  # first, ahead, behind: all due within NOTIFY_WITHIN

        await until(all_heard, timeout=5, what="the three NOTIFYs")
        # without its NOTIFY, the row behind the cursor stays unread: the cursor read only
        # moves forward
        await d.refresh()
        assert {x.job_id for x in d.held()} == {first, ahead}
        for channel, payload in heard:
            d.notified(None, 0, channel, payload)
        await d.refresh()
        assert {x.job_id for x in d.held()} == {first, ahead, behind}
    finally:
        await listener.close()


def rows_read(why: str) -> float:
    return REGISTRY.get_sample_value("horae_preload_rows_read_total", {"read": why}) or 0.0


async def test_a_notified_reread_behind_the_cursor_reads_only_the_rows_made_since(
    pool: asyncpg.Pool, d: Dispatcher, db_url: str
) -> None:
    """Creates of one second, committed in any order, fall behind each other's rows: the
    re-read a NOTIFY asks for starts at the new row and reads of the rows after it only
    those made since (before, every known row up to the cursor was read again)."""
    heard: list[tuple[str, str]] = []
    listener = await connect(db_url)
    await listener.add_listener("horae_shard_1", lambda *a: heard.append((a[2], a[3])))
    try:
        due = (datetime.now(UTC) + timedelta(seconds=40)).replace(microsecond=0)
        known = [await job_in_shard(pool, 1, due + timedelta(milliseconds=10 * i))
                 for i in range(30)]  # fmt: skip
        await d.gain(1)
        await d.refresh()  # the cursor now stands at the last of them
        late = await job_in_shard(pool, 1, due)  # due with the first, made after all

        async def all_heard() -> bool:
            return len(heard) == 31

        await until(all_heard, timeout=5, what="the NOTIFYs")
        before = rows_read("notified")
        d.notified(None, 0, *heard[-1])
        await d.refresh()
        assert {x.job_id for x in d.held()} == {*known, late}
        assert rows_read("notified") - before == 1  # the 29 known rows after it: not read
        # a notice that does not say when its rows were made (a retry's, from horae_finish)
        # still reads them all, as before
        before = rows_read("notified")
        d.notified(None, 0, "horae_shard_1", heard[-1][1].rsplit(" ", 1)[0])
        await d.refresh()
        assert rows_read("notified") - before == 30
        assert {x.job_id for x in d.held()} == {*known, late}
    finally:
        await listener.close()


async def test_a_row_put_back_under_its_id_while_still_known_is_read_again(
    pool: asyncpg.Pool, d: Dispatcher
) -> None:
    # A worker throttles (or hands back) an execution the dispatcher has just published
    # but not yet forgotten: the row is `scheduled` again, under its id, due a moment
    # later. The NOTIFY's re-read must load it at its new due time, not wait for the
    # next full re-read (a 30 s stall that lost a tenant-limit e2e test its deadline).
    due = (datetime.now(UTC) + timedelta(seconds=20)).replace(microsecond=0)
    job_id = await job_in_shard(pool, 1, due)
    await d.gain(1)
    await d.refresh()
    [before] = d.held()
    later = due + timedelta(seconds=1)
    async with pool.acquire() as conn:
        await conn.execute("UPDATE executions SET due_at = $2 WHERE id = $1", before.id, later)
    d.notified(None, 0, "horae_shard_1", "throttled")
    await d.refresh()
    assert {(x.job_id, x.due_at) for x in d.held()} == {(job_id, due), (job_id, later)}


async def test_rows_held_back_while_a_lease_lapsed_go_out_once_it_is_renewed(
    pool: asyncpg.Pool, publisher: broker.Publisher
) -> None:
    valid = False
    d = dispatcher(pool, publisher, lambda s: valid)
    due = datetime.now(UTC) - timedelta(seconds=1)
    job_id = await job_in_shard(pool, 1, due)
    await d.gain(1)
    await d.refresh()
    stop = asyncio.Event()
    loop = asyncio.ensure_future(d.run_dispatch(stop))

    async def dropped() -> bool:
        return not d.held()

    await until(dropped, timeout=5, what="the due row taken off the heap")
    stop.set()
    await loop
    status = "SELECT status::text FROM executions WHERE job_id = $1"
    assert await pool.fetchval(status, job_id) == "scheduled", "not published while lapsed"
    valid = True  # renewed: the next (periodic, not full) refresh loads the row again
    await d.refresh()
    assert [x.job_id for x in d.held()] == [job_id]


async def arrivals(
    broker_url: str, broker_prefix: str, d: Dispatcher, count: int
) -> dict[uuid.UUID, datetime]:
    """When each job's execution reached the queue, once `count` have (the dispatcher runs
    meanwhile, shard 1 its own)."""
    connection = await broker.connect(broker_url)
    arrived: dict[uuid.UUID, datetime] = {}
    try:
        channel = await connection.channel()
        queue = await channel.get_queue(broker.Names(broker_prefix).held)  # no pool: held

        async def note(message: broker.IncomingMessage) -> None:
            for e in ExecutionBatch.model_validate_json(message.body).executions:
                arrived[e.job_id] = datetime.now(UTC)
            await message.ack()

        await queue.consume(note)
        await d.gain(1)
        await d.refresh()
        stop = asyncio.Event()
        loop = asyncio.ensure_future(d.run_dispatch(stop))

        async def all_arrived() -> bool:
            return len(arrived) == count

        await until(all_arrived, timeout=15, what=f"{count} executions published")
        stop.set()
        await loop
    finally:
        await connection.close()
    return arrived


async def test_the_lead_publishes_early_except_where_the_due_moment_decides(
    pool: asyncpg.Pool, publisher: broker.Publisher, broker_url: str, broker_prefix: str
) -> None:
    # With a 2 s lead, an Allow job's execution goes out 2 s before it is due (waiting at a
    # worker); a Forbid job's waits for its due moment, when whether its
    # predecessor still runs is known.
    lead = timedelta(seconds=2)
    d = dispatcher(pool, publisher, lambda s: True, lead=lead)
    due = (datetime.now(UTC) + timedelta(seconds=4)).replace(microsecond=0) + timedelta(seconds=1)
    allow = await job_in_shard(pool, 1, due)
    forbid = await job_in_shard(pool, 1, due, policy=ConcurrencyPolicy.FORBID)
    arrived = await arrivals(broker_url, broker_prefix, d, 2)
    early = (due - arrived[allow]).total_seconds()
    assert 1.0 < early <= 2.1, f"the Allow execution was published {early:.3f} s early"
    assert arrived[forbid] >= due, (
        f"the Forbid one {(due - arrived[forbid]).total_seconds()} s early"
    )
    # Published, not claimed (no worker here): left scheduled, remembered as published.
    row = await pool.fetchrow("SELECT id, due_at, status::text FROM executions WHERE job_id = $1",
                              allow)  # fmt: skip
    assert row["status"] == "scheduled" and (row["id"], row["due_at"]) in d.published()


async def test_a_burst_is_published_its_burst_lead_ahead_and_a_lone_execution_when_due(
    pool: asyncpg.Pool, publisher: broker.Publisher, broker_url: str, broker_prefix: str
) -> None:
    # No dispatch lead, a burst lead of 2 s for 5 or more due within a quarter second: the 5
    # Allow executions due at one instant go out 2 s early; one due a second later, alone,
    # and a Forbid one in the burst's instant (judged at its due moment, and not counted),
    # go out when due.
    d = dispatcher(pool, publisher, lambda s: True, burst_lead=timedelta(seconds=2),
                   burst_size=5)  # fmt: skip
    due = (datetime.now(UTC) + timedelta(seconds=4)).replace(microsecond=0) + timedelta(seconds=1)
    burst = [await job_in_shard(pool, 1, due) for _ in range(5)]
    forbid = await job_in_shard(pool, 1, due, policy=ConcurrencyPolicy.FORBID)
    lone = await job_in_shard(pool, 1, due + timedelta(seconds=1))
    arrived = await arrivals(broker_url, broker_prefix, d, 7)
    for job_id in burst:
        early = (due - arrived[job_id]).total_seconds()
        assert 1.0 < early <= 2.1, f"a burst's execution was published {early:.3f} s early"
    assert arrived[forbid] >= due, (
        f"the Forbid one {(due - arrived[forbid]).total_seconds()} s early"
    )
    lone_due = due + timedelta(seconds=1)
    late = (arrived[lone] - lone_due).total_seconds()
    assert 0 <= late < 0.5, f"the lone execution was published {late:.3f} s after its due time"


async def test_the_reaper_counts_an_unclaimed_message_from_its_publication_or_due_time(
    pool: asyncpg.Pool, publisher: broker.Publisher, d: Dispatcher, broker_url: str,
    broker_prefix: str,
) -> None:  # fmt: skip
    # Redelivery timeout 10 s. A message published early (by a lead) waits at a worker until
    # it is due, so its time unclaimed runs from the later of the two instants.
    due = datetime.now(UTC) + timedelta(minutes=5)
    published_early_due_8s_ago = await job_in_shard(pool, 1, due)
    published_early_due_11s_ago = await job_in_shard(pool, 1, due)
    published_at_due_12s_ago = await job_in_shard(pool, 1, due)
    for job_id, published, due_ago in ((published_early_due_8s_ago, 13, 8),
                                       (published_early_due_11s_ago, 16, 11),
                                       (published_at_due_12s_ago, 12, 12)):  # fmt: skip
        await pool.execute(
            "UPDATE executions SET status = 'queued', enqueued_at = now() - make_interval(secs "
            "=> $2), due_at = now() - make_interval(secs => $3) WHERE job_id = $1",
            job_id, published, due_ago,
        )  # fmt: skip
    await d.gain(1)
    reaper = Reaper(Database(pool), publisher, d, redelivery_timeout=timedelta(seconds=10))
    assert await reaper.sweep() == (2, 0)

    connection = await broker.connect(broker_url)
    try:
        channel = await connection.channel()
        queue = await channel.get_queue(broker.Names(broker_prefix).held)  # no pool: held
        republished = set()
        while (got := await queue.get(no_ack=True, fail=False)) is not None:
            batch = ExecutionBatch.model_validate_json(got.body).executions
            republished |= {e.job_id for e in batch}
    finally:
        await connection.close()
    assert republished == {published_early_due_11s_ago, published_at_due_12s_ago}
    touched = await pool.fetch(
        "SELECT job_id FROM executions WHERE enqueued_at > now() - interval '5 seconds'"
    )
    assert {r["job_id"] for r in touched} == republished


async def test_what_the_dispatcher_published_stays_scheduled_and_only_the_unclaimed_go_again(
    pool: asyncpg.Pool, publisher: broker.Publisher, d: Dispatcher, broker_url: str,
    broker_prefix: str,
) -> None:  # fmt: skip
    # Three executions due now are published and left `scheduled`; a worker claims one. A
    # full re-read of the window loads none of them again (nothing is published twice by
    # the replica that published it). Past the redelivery timeout (1 s here) the reaper
    # publishes the two unclaimed ones again, once, and forgets the claimed one.
    due = datetime.now(UTC) + timedelta(seconds=1)
    ids = [await job_in_shard(pool, 1, due) for _ in range(3)]
    await d.gain(1)
    await d.refresh()
    stop = asyncio.Event()
    loop = asyncio.ensure_future(d.run_dispatch(stop))

    async def all_published() -> bool:
        return len(d.published()) == 3

    await until(all_published, timeout=10, what="the three published")
    stop.set()
    await loop
    rows = await pool.fetch("SELECT id, job_id, due_at, tenant, status::text FROM executions"
                            " WHERE job_id = ANY($1)", ids)  # fmt: skip
    assert {r["status"] for r in rows} == {"scheduled"}
    claimed = next(r for r in rows if r["job_id"] == ids[0])
    async with pool.acquire() as conn:
        answer = await transitions.claim(conn, claimed["id"], claimed["due_at"], owner="w",
                                         now=datetime.now(UTC), lease=timedelta(seconds=30),
                                         tenant=claimed["tenant"])  # fmt: skip
    assert isinstance(answer, Claimed)
    d.reload()
    await d.refresh()
    assert d.held() == [], "a re-read loaded what was published"
    await asyncio.sleep(1.1)
    reaper = Reaper(Database(pool), publisher, d, redelivery_timeout=timedelta(seconds=1),
                    check_after=timedelta())  # fmt: skip
    assert await reaper.sweep() == (2, 0)
    assert await reaper.sweep() == (0, 0), "republished again before its timeout ran out"
    assert {k[0] for k in d.published()} == {r["id"] for r in rows if r["job_id"] != ids[0]}

    sent = [m.job_id for m in await messages(broker_url, f"{broker_prefix}.held")]  # no pool
    assert sorted(sent) == sorted([ids[0], ids[1], ids[1], ids[2], ids[2]])


async def test_a_round_is_published_only_once_its_record_is_committed(
    pool: asyncpg.Pool, d: Dispatcher, broker_url: str, broker_prefix: str
) -> None:
    # A cron job firing every second. While another transaction holds its jobs row, the
    # round that dispatches its first occurrence cannot record the next one (its next fire
    # time is written there): nothing of that round is published meanwhile. Once the row
    # is free the round commits and publishes, so a worker claiming the execution finds the
    # next occurrence scheduled already, never a round in flight to wait for.
    job_id = job_in(1)
    async with pool.acquire() as conn:
        await jobs.create_job(conn, JobSpec(task="t", cron="* * * * * *"), tenant="t",
                              source=JobSource.API, shards=64, now=datetime.now(UTC),
                              job_id=job_id)  # fmt: skip
    first = await pool.fetchrow("SELECT id, due_at FROM executions WHERE job_id = $1", job_id)
    await d.gain(1)
    await d.refresh()
    stop = asyncio.Event()
    async with HeldWatch(broker_url, broker_prefix) as held, pool.acquire() as blocker:
        blocking = blocker.transaction()
        await blocking.start()
        await blocker.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", job_id)
        loop = asyncio.ensure_future(d.run_dispatch(stop))

        async def round_held_up() -> bool:  # the round's record waits for the job's row
            waiting = await pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )  # fmt: skip
            return bool(waiting)

        await until(round_held_up, timeout=10, what="the round's record held up")
        # (an absence: a message confirmed before the record began reaches the consumer
        # within milliseconds)
        await asyncio.sleep(0.5)
        assert held.arrived == {}, "published before its round was recorded"
        assert not d.published()
        await blocking.rollback()

        async def out() -> bool:
            return first["id"] in held.arrived

        await until(out, timeout=10, what="the first occurrence published")
        stop.set()
        await loop
    after = await pool.fetchrow(
        "SELECT created_at FROM executions WHERE job_id = $1 AND occurrence_at > $2"
        " ORDER BY occurrence_at LIMIT 1", job_id, first["due_at"],
    )  # fmt: skip
    assert after is not None, "the next occurrence was not scheduled"
    assert after["created_at"] < held.arrived[first["id"]][0]
    assert len(held.arrived[first["id"]]) == 1


async def test_what_falls_due_within_the_dispatch_interval_goes_out_in_one_message(
    pool: asyncpg.Pool, publisher: broker.Publisher, broker_url: str, broker_prefix: str
) -> None:
    # Rounds at most every 0.5 s: of four one-offs of one tenant due 0.1 s apart, the first
    # goes out at its due time, alone; the other three fall due before the next round may
    # start, and go out together, in one message, when it does (not before they are due).
    d = dispatcher(pool, publisher, lambda s: True, interval=timedelta(seconds=0.5))
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    ids = [await job_in_shard(pool, 1, first + timedelta(seconds=0.1 * i)) for i in range(4)]
    rows = await pool.fetch("SELECT id, job_id, due_at FROM executions WHERE job_id = ANY($1)"
                            " ORDER BY due_at", ids)  # fmt: skip
    await d.gain(1)
    await d.refresh()
    stop = asyncio.Event()
    async with HeldWatch(broker_url, broker_prefix) as held:
        loop = asyncio.ensure_future(d.run_dispatch(stop))

        async def all_out() -> bool:
            return all(r["id"] in held.arrived for r in rows)

        await until(all_out, timeout=10, what="the four published")
        stop.set()
        await loop
    arrived = [held.arrived[r["id"]] for r in rows]
    assert all(len(times) == 1 for times in arrived), arrived
    alone, *together = [times[0] for times in arrived]
    assert alone >= rows[0]["due_at"]
    assert len(set(together)) == 1, "the three due within the interval went out apart"
    assert together[0] - alone >= timedelta(seconds=0.45)
    assert together[0] >= rows[-1]["due_at"]


class CreatingListener(ShardListener):
    """Commits a job due soon in a shard just before listening on its channel: the moment
    at which, were the window read first, that job would fall between the read and the
    LISTEN."""

    def __init__(self, pool: asyncpg.Pool, *args: Any) -> None:
        super().__init__(*args)
        self.pool = pool
        self.created: list[uuid.UUID] = []

    async def add(self, shard: int) -> None:
        due = datetime.now(UTC) + timedelta(seconds=20)
        self.created.append(await job_in_shard(self.pool, shard, due))
        await super().add(shard)


async def test_rows_created_while_shards_are_taken_are_read_without_a_full_reread(
    pool: asyncpg.Pool, d: Dispatcher, db_url: str
) -> None:
    # A job created while a shard is being taken lands behind the preload cursor, so only
    # its NOTIFY makes the next (not full) refresh read it: the shard's channel must be
    # listened on before its window is read, or a job committed in between waits for the
    # full re-read, up to 30 s later.
    connected = asyncio.Event()
    heard: list[str] = []

    def reconnected() -> None:
        d.reload()
        connected.set()

    def notified(conn: object, pid: int, channel: str, payload: object) -> None:
        d.notified(conn, pid, channel, payload)
        heard.append(channel)

    listener = CreatingListener(pool, db_url, notified, reconnected)
    stop = asyncio.Event()
    listening = asyncio.ensure_future(listener.run(stop))
    await asyncio.wait_for(connected.wait(), timeout=10)  # its reload is behind us
    far = await job_in_shard(pool, 20, datetime.now(UTC) + timedelta(seconds=50))
    await d.gain(20)
    await d.refresh()  # full: the cursor now stands 50 s ahead
    try:
        for shard in range(1, 17):
            await take_shard(d, listener, shard)
        # NOTIFYs arrive in commit order: once a last job's has, every earlier one has too
        before = len(heard)
        created = [
            *listener.created,
            await job_in_shard(pool, 1, datetime.now(UTC) + timedelta(seconds=20)),
        ]

        async def last_heard() -> bool:
            return len(heard) > before

        await until(last_heard, timeout=5, what="the last job's NOTIFY")
        await d.refresh()
    finally:
        stop.set()
        await listening
    held = {x.job_id for x in d.held()}
    missing = [job for job in created if job not in held]
    assert len(created) == 17
    assert not missing, f"{len(missing)} of {len(created)} jobs wait for the full re-read"
    assert far in held


async def test_a_shard_whose_epoch_a_cut_off_dispatch_holds_is_not_taken_yet(
    pool: asyncpg.Pool, d: Dispatcher, db_url: str
) -> None:
    # The previous owner was cut off inside its dispatch transaction: taking the shard
    # gives up at once (NotYet: the lease loop releases it quietly and tries again later)
    # instead of stalling the loop, and renewals of every other shard with it.
    async with pool.acquire() as conn:
        epoch = await dispatch.take_shard(conn, 3, "cut-off", datetime.now(UTC))
    cut_off = await connect(db_url)
    listener = ShardListener(db_url, d.notified, d.reload)
    try:
        async with cut_off.transaction():
            assert await cut_off.fetch(dispatch.Q["lock_epochs"], [3], [epoch]) != []
            started = time.monotonic()
            with pytest.raises(NotYet):
                await take_shard(d, listener, 3)
            assert time.monotonic() - started < 2
            assert 3 not in d.epochs
    finally:
        await cut_off.close()
    await take_shard(d, listener, 3)  # the lock gone, it is taken
    assert d.epochs[3] == epoch + 1


async def test_shards_gained_together_take_their_epochs_and_windows_together_a_busy_one_alone(
    pool: asyncpg.Pool, d: Dispatcher, db_url: str
) -> None:
    # A failover gains a dead replica's shards all at once: their epochs are taken in one
    # transaction and their windows read in one refresh, overdue rows included. A shard
    # whose epoch a cut-off dispatch still holds fails its own gain only.
    shards = list(range(40, 48))
    busy = 46
    overdue = {s: await job_in_shard(pool, s, datetime.now(UTC) - timedelta(minutes=5))
               for s in shards}  # fmt: skip
    async with pool.acquire() as conn:
        before = {s: await dispatch.take_shard(conn, s, "dead", datetime.now(UTC)) for s in shards}

    async def taken() -> dict[int, asyncpg.Record]:
        rows = await pool.fetch("SELECT * FROM shard_epochs WHERE shard = ANY($1::smallint[])",
                                shards)  # fmt: skip
        return {r["shard"]: r for r in rows}

    together = shards[:4]
    assert await asyncio.gather(*(d.gain(s) for s in together)) == [None] * 4
    now = await taken()
    assert {s: (now[s]["epoch"], now[s]["owner"]) for s in together} == {
        s: (before[s] + 1, "d") for s in together
    }
    assert len({now[s]["taken_at"] for s in together}) == 1, "one transaction, not one each"

    cut_off = await connect(db_url)
    try:
        async with cut_off.transaction():
            await cut_off.fetch(dispatch.Q["lock_epochs"], [busy], [before[busy]])
            rest = shards[4:]
            gains = await asyncio.gather(*(d.gain(s) for s in rest), return_exceptions=True)
    finally:
        await cut_off.close()
    failed = {s: type(g).__name__ for s, g in zip(rest, gains, strict=True) if g is not None}
    assert failed == {busy: "ShardBusy"}
    now = await taken()
    assert {s: (now[s]["epoch"], now[s]["owner"]) for s in shards} == {
        s: (before[s], "dead") if s == busy else (before[s] + 1, "d") for s in shards
    }
    assert {s: d.epochs.get(s) for s in shards} == {
        s: None if s == busy else before[s] + 1 for s in shards
    }
    await d.refresh()
    held = {x.job_id for x in d.held()}
    assert held == {overdue[s] for s in shards if s != busy}


async def test_two_entries_of_one_execution_at_one_moment_do_not_stop_the_dispatch_loop(
    pool: asyncpg.Pool, d: Dispatcher
) -> None:
    # The two-group chaos run with a dispatch lead lost executions this way. The likeliest
    # path to the two entries: a shard moved into this group while the other group's
    # dispatcher had published one of its executions ahead; this dispatcher read the row
    # (id, due) and, its tenant at its limit, held it back; the worker's claim, once due,
    # throttled the row to a new due time, which a re-read added too. Both entries held
    # back to the same moment: `heappop` compared the executions, raised TypeError, and
    # the group's dispatch loop ended (its executions waited for ever).
    async with pool.acquire() as conn:
        await tenants.set_tenant_limit(conn, "t", 1)
    try:
        running = await job_in_shard(pool, 3, datetime.now(UTC) - timedelta(seconds=1))
        await pool.execute("UPDATE executions SET status = 'running', lease_owner = 'w',"
                           " lease_until = now() + interval '1 minute', started_at = now()"
                           " WHERE job_id = $1", running)  # fmt: skip  # t at its limit
        await job_in_shard(pool, 1, datetime.now(UTC) - timedelta(seconds=1))
        await d.gain(1)
        await d.refresh()
        [due] = d.held()
        throttled = dataclasses.replace(due, due_at=due.due_at + timedelta(seconds=1))
        again = datetime.now(UTC) + timedelta(milliseconds=100)
        d._hold_back([(due, again), (throttled, again)])  # as the two reads left them
        stop = asyncio.Event()
        loop = asyncio.ensure_future(d.run_dispatch(stop))

        async def held_back_twice() -> bool:
            # Each look holds both back again, 0.5 s then 1 s later (the gate's waits).
            assert not loop.done(), f"the dispatch loop ended: {loop.exception()!r}"
            return all(when > again + timedelta(seconds=1.4) for when, _, _ in d._heap)

        await until(held_back_twice, timeout=10, interval=0.1, what="two more looks")
        stop.set()
        await loop
        assert {(x.id, x.due_at) for x in d.held()} >= {
            (due.id, due.due_at),
            (due.id, throttled.due_at),
        }
    finally:
        async with pool.acquire() as conn:
            await tenants.set_tenant_limit(conn, "t", None)

"""The job store's transitions on a real PostgreSQL."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from horae.errors import Conflict, QuotaExceeded, ShardBusy
from horae.models import ConcurrencyPolicy, ExecutionStatus, JobSource, JobSpec, RetryPolicy
from horae.store import dispatch, executions, jobs, quotas, reads, tenants
from horae.store.db import WORKER_IDLE_IN_TRANSACTION_TIMEOUT_MS, connect, connect_pool
from horae.store.dispatch import parse_notify
from horae.store.new_jobs import NewJob, insert_jobs
from tests.support import transitions
from tests.support.wait import until

# The store's functions on one group's database: what every group runs (routing over
# groups: test_store_groups).
pytestmark = pytest.mark.one_group

NOW = datetime.now(UTC).replace(microsecond=0)
DUE = NOW + timedelta(minutes=1)
"""When `one_offs`' executions are due."""


def cron_spec(expr: str = "*/10 * * * * *") -> JobSpec:
    return JobSpec(task="t", cron=expr)


async def cron_job(conn: asyncpg.Connection, expr: str = "*/10 * * * * *") -> uuid.UUID:
    """A cron job of tenant acme, created at NOW."""
    return await jobs.create_job(
        conn, cron_spec(expr), tenant="acme", source=JobSource.API, shards=64, now=NOW
    )


async def rows(pool: asyncpg.Pool, job_id: uuid.UUID) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT * FROM executions WHERE job_id = $1 ORDER BY due_at, created_at", job_id
    )


async def test_create_inserts_the_job_and_its_first_execution(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        job_id = await cron_job(conn, "0 * * * *")
    job = await pool.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id)
    assert job["state"] == "active" and job["spec_version"] == 1
    assert job["shard"] == job_id.int % 64
    [execution] = await rows(pool, job_id)
    # the first hour boundary at or after NOW (NOW itself when the test starts on the hour)
    top_of_hour = (NOW + timedelta(minutes=59, seconds=59)).replace(minute=0, second=0)
    assert execution["status"] == "scheduled"
    assert execution["due_at"] == execution["occurrence_at"] == top_of_hour
    assert execution["shard"] == job["shard"] and execution["attempt"] == 1


async def test_near_term_execution_notifies_its_shard(pool: asyncpg.Pool, db_url: str) -> None:
    spec = JobSpec(task="t", run_at=NOW + timedelta(seconds=5))
    job_id = uuid.uuid4()
    shard = job_id.int % 64
    listener = await connect(db_url)
    heard: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener(f"horae_shard_{shard}", lambda *a: heard.put_nowait(a[3]))
    try:
        async with pool.acquire() as conn:
            await jobs.create_job(
                conn, spec, tenant="acme", source=JobSource.API, shards=64, now=NOW,
                job_id=job_id,
            )  # fmt: skip
        payload = await asyncio.wait_for(heard.get(), timeout=5)
        [execution] = await rows(pool, job_id)
        # the shard's smallest new (due_at, id), to the id's creation millisecond: a key the
        # scheduler reads from; never the id, which any role that may LISTEN would hear
        notice = parse_notify(payload)
        assert notice is not None
        due, floor = notice.key
        assert due == execution["due_at"] and floor <= execution["id"]
        assert floor.int >> 80 == execution["id"].int >> 80
        assert notice.made == floor  # the one new id's millisecond is the smallest's too
        assert str(execution["id"]) not in payload and execution["id"].hex not in payload
    finally:
        await listener.close()


async def test_edit_cancels_pending_and_schedules_from_the_new_spec(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        job_id = await cron_job(conn, "0 * * * *")
        version = await jobs.edit_job(conn, job_id, cron_spec("30 * * * *"), now=NOW)
    assert version == 2
    old, new = sorted(await rows(pool, job_id), key=lambda r: r["job_version"])
    assert old["status"] == "cancelled" and old["error_kind"] == "superseded"
    assert new["status"] == "scheduled" and new["job_version"] == 2
    assert new["due_at"].minute == 30


async def test_pause_cancels_pending_and_resume_records_the_missed_and_schedules_from_now(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        job_id = await cron_job(conn, "0 * * * *")
        await jobs.pause_job(conn, job_id, now=NOW)
        assert [r["status"] for r in await rows(pool, job_id)] == ["cancelled"]
        assert await pool.fetchval("SELECT state FROM jobs WHERE id = $1", job_id) == "paused"
        later = NOW + timedelta(hours=3)
        await jobs.resume_job(conn, job_id, now=later)
    statuses = [(r["status"], r["due_at"], r["occurrence_at"]) for r in await rows(pool, job_id)]
    # The default catch-up, Latest: the most recent missed occurrence runs now.
    newest = (later - timedelta(seconds=5)).replace(minute=0, second=0, microsecond=0)
    assert statuses[-1] == ("scheduled", later, newest)
    assert await pool.fetchval("SELECT state FROM jobs WHERE id = $1", job_id) == "active"
    # the others are recorded, with UUIDv7 ids like every execution
    skipped = [r for r in await rows(pool, job_id) if r["status"] == "skipped"]
    assert len(skipped) == 2 and all(r["error_kind"] == "paused" for r in skipped)
    assert [r["id"].version for r in skipped] == [7, 7]


async def test_cancel_keeps_history(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        job_id = await cron_job(conn)
        assert await jobs.cancel_job(conn, job_id, now=NOW) is True
        assert await jobs.cancel_job(conn, job_id, now=NOW) is False
    [execution] = await rows(pool, job_id)
    assert execution["status"] == "cancelled" and execution["finished_at"] is not None
    assert await pool.fetchval("SELECT state FROM jobs WHERE id = $1", job_id) == "cancelled"


async def test_a_cancel_waits_for_an_outcome_being_recorded_instead_of_deadlocking(
    pool: asyncpg.Pool,
) -> None:
    """A worker recording an outcome locks the execution, then its job (horae_finish); a
    cancel (pause, edit) used to lock the job, then its executions: each waited for the
    other until PostgreSQL aborted one (seen in a split run). The cancel now locks the job's
    unfinished executions first, so it waits for the outcome and both go through."""
    async with pool.acquire() as conn:
        job_id = await cron_job(conn, "*/5 * * * * *")
        [pending] = await rows(pool, job_id)
        claimed = await transitions.claim(conn, pending["id"], pending["due_at"], owner="w",
                                          now=NOW, lease=timedelta(seconds=30),
                                          tenant="acme")  # fmt: skip
        assert isinstance(claimed, transitions.Claimed)
    async with pool.acquire() as worker, pool.acquire() as api:
        async with worker.transaction():
            # the outcome's first lock: its execution
            await worker.execute("SELECT 1 FROM executions WHERE id = $1 FOR UPDATE", pending["id"])
            cancel = asyncio.create_task(jobs.cancel_job(api, job_id, now=NOW))
            await asyncio.sleep(0.5)
            assert not cancel.done(), "the cancel waits for the outcome's lock"
            # its second: the job (under the old order, the cancel held it: a deadlock)
            await worker.execute("SET LOCAL lock_timeout = '3s'")
            await worker.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", job_id)
        assert await asyncio.wait_for(cancel, 5) is True
    assert await pool.fetchval("SELECT state FROM jobs WHERE id = $1", job_id) == "cancelled"
    running = await pool.fetchrow("SELECT * FROM executions WHERE id = $1", pending["id"])
    assert running["status"] == "running" and running["cancel_requested"]


async def test_fenced_write_under_a_stale_epoch_changes_nothing(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        job_id = await cron_job(conn)
        shard = job_id.int % 64
        old_epoch = await dispatch.take_shard(conn, shard, "replica-a", NOW)
        new_epoch = await dispatch.take_shard(conn, shard, "replica-b", NOW)
        assert new_epoch == old_epoch + 1
        due = await dispatch.preload(conn, [shard], NOW + timedelta(minutes=5), 100)
        assert [d.job_id for d in due] == [job_id]
        assert await transitions.record_published(conn, shard, old_epoch, due, NOW) is None
        assert (await rows(pool, job_id))[0]["status"] == "scheduled"
        assert await transitions.record_published(conn, shard, new_epoch, due, NOW) == 1
    found = [(r["occurrence_at"], r["status"]) for r in await rows(pool, job_id)]
    assert len(found) == 2, "dispatching a cron occurrence schedules the next"
    assert found[0] == (due[0].occurrence_at, "scheduled"), "published, left for a claim"
    assert found[1][0] > found[0][0] and found[1][1] == "scheduled"


async def test_claim_runs_once_and_stale_executions_are_cancelled(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        job_id = await cron_job(conn)
        [first] = await rows(pool, job_id)
        lease = timedelta(seconds=30)
        claimed = await transitions.claim(
            conn,
            first["id"],
            first["due_at"],
            owner="w1",
            now=NOW,
            lease=lease,
            tenant="acme",
        )
        assert claimed is not None and claimed.attempt == 1
        again = await transitions.claim(
            conn,
            first["id"],
            first["due_at"],
            owner="w2",
            now=NOW,
            lease=lease,
            tenant="acme",
        )
        assert again is None, "a duplicate message must not claim twice"

        await jobs.edit_job(conn, job_id, cron_spec("*/20 * * * * *"), now=NOW)
        pending = [r for r in await rows(pool, job_id) if r["status"] == "scheduled"]
        await pool.execute(
            "UPDATE executions SET status = 'queued' WHERE id = $1", pending[0]["id"]
        )
        await pool.execute("UPDATE jobs SET state = 'paused' WHERE id = $1", job_id)
        stale = await transitions.claim(
            conn,
            pending[0]["id"],
            pending[0]["due_at"],
            owner="w1",
            now=NOW,
            lease=lease,
            tenant="acme",
        )
        assert stale is None
    row = await pool.fetchrow("SELECT * FROM executions WHERE id = $1", pending[0]["id"])
    assert row["status"] == "cancelled" and row["error_kind"] == "stale"


async def test_an_edit_keeping_the_schedule_still_schedules_the_next_occurrence(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        job_id = await cron_job(conn, "0 * * * *")
        edited = JobSpec(task="t", cron="0 * * * *", payload={"v": 2})
        await jobs.edit_job(conn, job_id, edited, now=NOW)
        await jobs.pause_job(conn, job_id, now=NOW)
        await jobs.resume_job(conn, job_id, now=NOW)
    found = [(r["status"], r["job_version"]) for r in await rows(pool, job_id)]
    assert sorted(found) == [("cancelled", 1), ("cancelled", 2), ("scheduled", 2)]


async def test_scheduling_the_same_occurrence_twice_is_harmless(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        job_id = await cron_job(conn)
        shard = job_id.int % 64
        epoch = await dispatch.take_shard(conn, shard, "replica-a", NOW)
        due = await dispatch.preload(conn, [shard], NOW + timedelta(minutes=5), 100)
        assert await transitions.record_published(conn, shard, epoch, due, NOW) == 1
        # A second dispatch of the same batch (e.g. after a crash) schedules no second copy
        # of the next occurrence.
        assert await transitions.record_published(conn, shard, epoch, due, NOW) == 1
    assert [r["status"] for r in await rows(pool, job_id)] == ["scheduled", "scheduled"]


async def one_offs(
    conn: asyncpg.Connection, n: int, tenant: str = "acme", **kw: object
) -> list[asyncpg.Record]:
    """`n` one-off jobs of `tenant` due in a minute; their executions, in creation order."""
    ids = [
        await jobs.create_job(
            conn,
            JobSpec(task="t", run_at=NOW + timedelta(minutes=1), **kw),
            tenant=tenant,
            source=JobSource.API,
            shards=64,
            now=NOW,
        )
        for _ in range(n)
    ]
    return [(await conn.fetch("SELECT * FROM executions WHERE job_id = $1", i))[0] for i in ids]


async def test_a_batch_of_claims_answers_each_request(pool: asyncpg.Pool) -> None:
    lease = timedelta(seconds=30)
    async with pool.acquire() as conn:
        fresh, duplicate, stale = await one_offs(conn, 3)
        await transitions.claim(conn, duplicate["id"], duplicate["due_at"], owner="w0",
                               now=NOW, lease=lease, tenant="acme")  # fmt: skip
        await jobs.pause_job(conn, stale["job_id"], now=NOW)
        answers = await executions.claim_many(
            conn, [executions.ClaimRequest(r["id"], r["due_at"], "acme")
                   for r in (stale, fresh, duplicate, fresh)],
            owner="w1", now=NOW, lease=lease, serves={"acme"},
        )  # fmt: skip
    assert answers[0] is None and answers[2] is None
    assert answers[3] is None, "the same execution twice in one batch is claimed once"
    assert isinstance(answers[1], executions.Claimed) and answers[1].id == fresh["id"]
    owners = {r["id"]: (r["status"], r["lease_owner"]) for r in await pool.fetch(
        "SELECT id, status, lease_owner FROM executions")}  # fmt: skip
    assert owners[fresh["id"]] == ("running", "w1")
    assert owners[duplicate["id"]] == ("running", "w0"), "a duplicate never changes hands"
    assert owners[stale["id"]][0] == "cancelled"


async def test_a_batch_of_claims_keeps_a_tenant_within_its_limit(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        await tenants.set_tenant_limit(conn, "acme", 2)
        found = await one_offs(conn, 5)
        answers = await executions.claim_many(
            conn, [executions.ClaimRequest(r["id"], r["due_at"], "acme") for r in found],
            owner="w1", now=DUE, lease=timedelta(seconds=30), serves={"acme"},
        )  # fmt: skip
    assert sum(isinstance(a, executions.Claimed) for a in answers) == 2
    assert sum(isinstance(a, executions.Throttled) for a in answers) == 3
    leases = await pool.fetch("SELECT id, lease_until FROM executions WHERE status = 'running'")
    assert {a.id: a.lease_until for a in answers if isinstance(a, executions.Claimed)} == {
        r["id"]: r["lease_until"] for r in leases
    }, "each claim answers its lease as the store set it"
    statuses = sorted(r["status"] for r in await pool.fetch("SELECT status FROM executions"))
    assert statuses == ["running"] * 2 + ["scheduled"] * 3


async def test_a_claim_ahead_of_the_due_time_leases_from_it_and_records_the_real_start(
    pool: asyncpg.Pool,
) -> None:
    # Claimed a minute early (the worker got the message with the scheduler's lead): the
    # row is running with no start time, its lease counted from its due time; a heartbeat
    # never shortens that lease; the outcome records when the handler began.
    lease = timedelta(seconds=30)
    async with pool.acquire() as conn:
        [row] = await one_offs(conn, 1)
        claimed = await transitions.claim(
            conn, row["id"], row["due_at"], owner="w1", now=NOW, lease=lease, tenant="acme"
        )
        assert isinstance(claimed, executions.Claimed)
        held = await conn.fetchrow("SELECT * FROM executions WHERE id = $1", row["id"])
        assert (held["status"], held["lease_owner"], held["started_at"]) == ("running", "w1", None)
        assert held["lease_until"] == row["due_at"] + lease == claimed.lease_until
        beat = await executions.heartbeat(conn, owner="w1", now=NOW, lease=lease, ids=[row["id"]])
        assert beat.extended == {row["id"]}
        assert (
            await conn.fetchval("SELECT lease_until FROM executions WHERE id = $1", row["id"])
            == row["due_at"] + lease
        ), "the heartbeat shortened a lease counted from the due time"
        began = row["due_at"] + timedelta(milliseconds=40)
        outcome = executions.Finish(claimed, ExecutionStatus.SUCCEEDED, started_at=began)
        assert await executions.finish_many(conn, [outcome], owner="w1", now=began) == [True]
        done = await conn.fetchrow("SELECT * FROM executions WHERE id = $1", row["id"])
    assert (done["status"], done["started_at"]) == ("succeeded", began)


async def test_a_limited_tenants_execution_is_claimed_only_once_due(pool: asyncpg.Pool) -> None:
    # A tenant's limit counts running rows: one claimed ahead would take a slot before it runs.
    # So the claim answers Early and leaves the row as it was; once due it is claimed.
    async with pool.acquire() as conn:
        await tenants.set_tenant_limit(conn, "acme", 5)
        [limited] = await one_offs(conn, 1)
        [free] = await one_offs(conn, 1, tenant="free")
        answers = await executions.claim_many(
            conn, [executions.ClaimRequest(r["id"], r["due_at"], r["tenant"])
                   for r in (limited, free)],
            owner="w1", now=NOW, lease=timedelta(seconds=30), serves={"acme", "free"},
        )  # fmt: skip
        assert answers[0] == executions.EARLY
        assert isinstance(answers[1], executions.Claimed), "an unlimited tenant's is claimed ahead"
        after = await conn.fetchrow("SELECT * FROM executions WHERE id = $1", limited["id"])
        assert dict(after) == dict(limited), "a row answered Early is left untouched"
        lease = timedelta(seconds=30)
        due = await transitions.claim(
            conn, limited["id"], limited["due_at"], owner="w1", now=DUE, lease=lease, tenant="acme"
        )
        assert isinstance(due, executions.Claimed)
        started = await conn.fetchval(
            "SELECT started_at FROM executions WHERE id = $1", limited["id"]
        )
    assert started == DUE


async def test_a_hand_back_never_makes_an_execution_due_earlier(pool: asyncpg.Pool) -> None:
    # A stopping worker gives back what it claimed ahead: due as it was (a microsecond later:
    # a new key, which the scheduler that published it reads again), not "now".
    lease = timedelta(seconds=30)
    async with pool.acquire() as conn:
        [ahead, overdue] = await one_offs(conn, 2)
        for row in (ahead, overdue):
            when = NOW if row is ahead else DUE
            claimed = await transitions.claim(
                conn, row["id"], row["due_at"], owner="w1", now=when, lease=lease, tenant="acme"
            )
            assert isinstance(claimed, executions.Claimed)
        later = DUE + timedelta(seconds=5)
        assert await executions.release_running(conn, owner="w1", ids=[ahead["id"]], now=NOW) == 1
        assert await executions.release_running(conn, owner="w1", ids=[overdue["id"]],
                                                now=later) == 1  # fmt: skip
        dues = dict(await conn.fetch(
            "SELECT id, due_at FROM executions WHERE status = 'scheduled'"))  # fmt: skip
    assert dues == {ahead["id"]: ahead["due_at"] + timedelta(microseconds=1), overdue["id"]: later}


async def waiting_for_a_lock(pool: asyncpg.Pool, conn: asyncpg.Connection, what: str) -> None:
    """Until `conn`'s backend waits for a lock."""
    pid = conn.get_server_pid()
    query = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1"

    async def waits() -> bool:
        return bool(await pool.fetchval(query, pid))

    await until(waits, timeout=10, interval=0.02, what=what)


async def test_a_claim_and_a_dispatch_record_never_deadlock_over_a_limited_tenants_rows(
    pool: asyncpg.Pool,
) -> None:
    """Rows w < x < a1 < a2; acme (a1, a2) is limited. A batched dispatch write of all four
    (a Replace round's request_cancel; a `queued` mark in earlier releases) locks w, then
    waits for x (held here). A claim of [a1, a2, w] used to lock the
    limited tenant's rows first (a1, a2), then the rest (w): it held a1 and a2 and waited
    for w, and once x was free the record waited for a1: a deadlock, one of the two
    aborted after deadlock_timeout (1 s of every claim in the batch held up)."""
    async with pool.acquire() as conn:
        await tenants.set_tenant_limit(conn, "acme", 1)
        w, x = await one_offs(conn, 2, tenant="free")
        a1, a2 = await one_offs(conn, 2)
    assert w["id"] < x["id"] < a1["id"] < a2["id"]
    async with pool.acquire() as holder, pool.acquire() as worker, pool.acquire() as sched:
        blocker = holder.transaction()
        await blocker.start()
        await holder.execute("SELECT 1 FROM executions WHERE id = $1 FOR UPDATE", x["id"])
        record = sched.transaction()
        await record.start()
        rows = (w, x, a1, a2)
        mark = asyncio.create_task(sched.execute(
            dispatch.Q["request_cancel"], [r["id"] for r in rows], [r["due_at"] for r in rows],
            NOW, "replaced",
        ))  # fmt: skip
        await waiting_for_a_lock(pool, sched, "the record holds w and waits for x")
        requests = [executions.ClaimRequest(r["id"], r["due_at"], r["tenant"]) for r in (a1, a2, w)]
        claim = asyncio.create_task(executions.claim_many(
            worker, requests, owner="w1", now=NOW, lease=timedelta(seconds=30),
            serves={"acme", "free"},
        ))  # fmt: skip
        await waiting_for_a_lock(pool, worker, "the claim waits for w")
        await blocker.commit()  # x is free: the record goes on
        failures: list[BaseException] = []
        try:
            await asyncio.wait_for(mark, timeout=30)
        except Exception as exc:
            failures.append(exc)
            await record.rollback()
        else:
            await record.commit()
        try:
            await asyncio.wait_for(claim, timeout=30)
        except Exception as exc:
            failures.append(exc)
    assert failures == [], f"claim and dispatch record deadlocked: {failures}"


async def test_a_claim_left_open_by_a_frozen_worker_stops_holding_its_rows_after_2_s(
    pool: asyncpg.Pool, db_url: str
) -> None:
    """A worker frozen between its claim's statements (SIGSTOP): Postgres ends its session
    2 s later (a worker's pools), so another worker, handed the message back by RabbitMQ,
    claims the row then, not after the 5 s of every other component's connections."""
    async with pool.acquire() as conn:
        [row] = await one_offs(conn, 1)
    request = [executions.ClaimRequest(row["id"], row["due_at"], "acme")]
    lease = timedelta(seconds=30)
    frozen_pool = await connect_pool(
        db_url, size=1, idle_in_transaction_ms=WORKER_IDLE_IN_TRANSACTION_TIMEOUT_MS
    )
    try:
        async with frozen_pool.acquire() as frozen, pool.acquire() as other:
            held = frozen.transaction()
            await held.start()
            claimed = await frozen.fetch(
                executions.Q["claim"], [row["id"]], [row["due_at"]], ["acme"], ["acme"],
                "frozen", NOW, lease, timedelta(seconds=1),
            )  # fmt: skip
            assert [r["outcome"] for r in claimed] == ["claimed"]
            t0 = time.monotonic()
            answers = await executions.claim_many(
                other, request, owner="other", now=NOW, lease=lease, serves={"acme"}
            )
            waited = time.monotonic() - t0
            with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
                await held.commit()  # its session was ended: nothing it claimed holds
    finally:
        frozen_pool.terminate()
    assert isinstance(answers[0], executions.Claimed)
    assert 1.5 < waited < 4.0, f"the other claim waited {waited:.2f} s for the frozen one"
    owner = await pool.fetchval("SELECT lease_owner FROM executions WHERE id = $1", row["id"])
    assert owner == "other"


async def test_a_claim_refuses_an_execution_of_a_tenant_the_worker_does_not_serve(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        [theirs] = await one_offs(conn, 1, tenant="team-a")
        [ours] = await one_offs(conn, 1, tenant="team-b")
        answers = await executions.claim_many(
            conn,
            [
                executions.ClaimRequest(theirs["id"], theirs["due_at"], "team-a"),
                executions.ClaimRequest(ours["id"], ours["due_at"], "team-b"),
            ],
            owner="team-b-worker",
            now=NOW,
            lease=timedelta(seconds=30),
            serves={"team-b"},
        )
    refused, claimed = answers
    assert isinstance(refused, executions.Refused) and refused.tenant == "team-a"
    assert "does not serve" in refused.reason
    assert isinstance(claimed, executions.Claimed) and claimed.id == ours["id"]
    after = await pool.fetchrow("SELECT * FROM executions WHERE id = $1", theirs["id"])
    assert dict(after) == dict(theirs), "a refused execution's row is left untouched"


async def test_a_message_lying_about_its_tenant_cannot_exceed_the_row_tenants_limit(
    pool: asyncpg.Pool,
) -> None:
    # acme may run one execution and runs one. A message that names an unlimited tenant
    # for acme's next execution, read by a worker serving both, must not start it.
    async with pool.acquire() as conn:
        await tenants.set_tenant_limit(conn, "acme", 1)
        running, waiting = await one_offs(conn, 2)
        lease = timedelta(seconds=30)
        first = await transitions.claim(
            conn, running["id"], running["due_at"], owner="w0", now=DUE, lease=lease, tenant="acme"
        )
        assert isinstance(first, executions.Claimed)
        lying = executions.ClaimRequest(waiting["id"], waiting["due_at"], "free")
        [answer] = await executions.claim_many(
            conn, [lying], owner="w1", now=DUE, lease=lease, serves={"acme", "free"}
        )
    assert isinstance(answer, executions.Refused) and answer.tenant == "acme"
    counted = "SELECT count(*) FROM executions WHERE tenant = 'acme' AND status = 'running'"
    assert await pool.fetchval(counted) == 1, "acme's limit was exceeded"
    after = await pool.fetchrow("SELECT * FROM executions WHERE id = $1", waiting["id"])
    assert dict(after) == dict(waiting)


async def test_a_batch_of_outcomes_records_only_what_the_owner_still_holds(
    pool: asyncpg.Pool,
) -> None:
    lease = timedelta(seconds=30)
    async with pool.acquire() as conn:
        found = await one_offs(conn, 3, retry={"max_attempts": 3})
        claimed = [
            await transitions.claim(
                conn, r["id"], r["due_at"], owner="w1", now=NOW, lease=lease, tenant="acme"
            )
            for r in found
        ]
        assert all(isinstance(c, executions.Claimed) for c in claimed)
        ok, failed, lost = claimed  # type: ignore[misc]
        # the reaper ended `lost` while w1 still ran it
        await conn.execute(
            "UPDATE executions SET status = 'failed', finished_at = $2, lease_until = NULL "
            "WHERE id = $1", lost.id, NOW,
        )  # fmt: skip
        later = NOW + timedelta(seconds=5)
        answers = await executions.finish_many(conn, [
            executions.Finish(ok, ExecutionStatus.SUCCEEDED),
            executions.Finish(failed, ExecutionStatus.FAILED, "error", "boom", retry_at=later),
            executions.Finish(lost, ExecutionStatus.SUCCEEDED),
        ], owner="w1", now=NOW)  # fmt: skip
    assert answers == [True, True, False]
    by_job = {}
    for r in await pool.fetch("SELECT * FROM executions ORDER BY attempt"):
        by_job.setdefault(r["job_id"], []).append((r["status"], r["attempt"], r["due_at"]))
    assert by_job[ok.job_id] == [("succeeded", 1, ok.due_at)]
    assert by_job[failed.job_id] == [("failed", 1, failed.due_at), ("scheduled", 2, later)]
    assert by_job[lost.job_id] == [("failed", 1, lost.due_at)]
    job_rows = {r["id"]: r for r in await pool.fetch("SELECT * FROM jobs")}
    assert (job_rows[ok.job_id]["state"], job_rows[ok.job_id]["last_status"]) == (
        "completed", "succeeded")  # fmt: skip
    assert (job_rows[failed.job_id]["state"], job_rows[failed.job_id]["last_status"]) == (
        "active", "failed")  # fmt: skip
    assert job_rows[lost.job_id]["last_status"] is None


async def test_one_dispatch_round_records_every_shard_it_still_holds(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        found = await one_offs(conn, 12)
        by_shard: dict[int, list[dispatch.Due]] = {}
        epochs = {}
        for r in found:
            if r["shard"] not in epochs:
                epochs[r["shard"]] = await dispatch.take_shard(conn, r["shard"], "a", NOW)
        due = await dispatch.preload(conn, sorted(epochs), NOW + timedelta(minutes=5), 100)
        for d in due:
            by_shard.setdefault(d.shard, []).append(d)
        assert len(by_shard) >= 2
        lost_shard = min(by_shard)
        await dispatch.take_shard(conn, lost_shard, "b", NOW)  # another replica took it
        # A round that skips every execution (past its deadline), so that each shard's
        # record shows on its rows.
        _, fenced = await dispatch.record_dispatch(conn, {
            shard: dispatch.ShardDispatch(
                epochs[shard], skipped=[dispatch.Skip(d, "deadline", "late") for d in dues]
            )
            for shard, dues in by_shard.items()
        }, NOW)  # fmt: skip
    assert fenced == {lost_shard}
    for r in await pool.fetch("SELECT shard, status, error_kind FROM executions"):
        if r["shard"] == lost_shard:
            assert (r["status"], r["error_kind"]) == ("scheduled", None)
        else:
            assert (r["status"], r["error_kind"]) == ("skipped", "deadline")


async def test_a_dispatch_cut_off_mid_transaction_holds_up_a_takeover_only_briefly(
    pool: asyncpg.Pool, db_url: str
) -> None:
    # A scheduler cut off (or paused) right after fencing its dispatch holds its shard's
    # epoch row until Postgres ends its idle transaction; a take meanwhile gives up within
    # half a second, so the taker's lease loop goes on, and succeeds once the lock is gone.
    async with pool.acquire() as conn:
        epoch = await dispatch.take_shard(conn, 5, "cut-off", NOW)
    cut_off = await connect(db_url)
    try:
        transaction = cut_off.transaction()
        await transaction.start()
        assert await cut_off.fetch(dispatch.Q["lock_epochs"], [5], [epoch]) != []
        started = time.monotonic()
        async with pool.acquire() as conn:
            with pytest.raises(ShardBusy):
                await dispatch.take_shard(conn, 5, "taker", NOW)
        assert time.monotonic() - started < 2, "the take waited on the lock"

        async def take() -> int | None:
            async with pool.acquire() as conn:
                try:
                    return await dispatch.take_shard(conn, 5, "taker", NOW)
                except ShardBusy:
                    return None

        taken = await until(take, timeout=15, interval=0.5, what="the cut-off transaction ended")
        assert taken == epoch + 1
        waited = time.monotonic() - started
        assert 4 <= waited < 10, f"taken {waited:.1f} s after the cut (Postgres ends it at 5 s)"
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
            await cut_off.fetch("SELECT 1")  # its session is gone
    finally:
        await cut_off.close()


@pytest.mark.parametrize(
    ("catch_up", "window", "first", "last_skipped"),
    [
        # (The gap ends GRACE (5 s) before now: what is due since is no gap, it runs.)
        ("Skip", None, (-4, -4), -5),  # none of the gap; on from the next occurrence
        ("Latest", None, (-5, 0), -6),  # the newest, now
        ("All", 30, (-30, 0), -31),  # the first of those within 30 s, now; the rest follow
    ],
)
async def test_resuming_an_every_second_job_paused_for_a_year_is_quick_and_records_the_last_100(
    pool: asyncpg.Pool,
    catch_up: str,
    window: int | None,
    first: tuple[int, int],
    last_skipped: int,
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    paused_at = now - timedelta(days=365)
    spec = JobSpec(task="t", cron="* * * * * *", catch_up=catch_up, catch_up_window_seconds=window)
    async with pool.acquire() as conn:
        job_id = await jobs.create_job(
            conn, spec, tenant="acme", source=JobSource.API, shards=64, now=paused_at
        )
        await jobs.pause_job(conn, job_id, now=paused_at)
        started = time.monotonic()
        await jobs.resume_job(conn, job_id, now=now)
        took = time.monotonic() - started
    assert took < 2.0, f"resume took {took:.1f}s"
    made = [r for r in await rows(pool, job_id) if r["created_at"] == now]
    skipped = sorted(
        (r["occurrence_at"], r["error_kind"]) for r in made if r["status"] == "skipped"
    )
    scheduled = sorted(
        (r["occurrence_at"], r["due_at"]) for r in made if r["status"] == "scheduled"
    )
    second = timedelta(seconds=1)
    assert skipped == [(now + (last_skipped - i) * second, "paused") for i in range(99, -1, -1)]
    assert scheduled == [(now + first[0] * second, now + first[1] * second)]
    message = next(r["error_message"] for r in made if r["status"] == "skipped")
    assert message.startswith("job was paused at this time; ")


async def test_a_rerun_that_makes_a_completed_one_off_live_again_is_held_to_the_quota(
    pool: asyncpg.Pool,
) -> None:
    lease = timedelta(seconds=30)
    async with pool.acquire() as conn:
        await tenants.set_tenant_limit(conn, "acme", None, max_jobs=1)
        [dead] = await one_offs(conn, 1)
        claimed = await transitions.claim(
            conn, dead["id"], dead["due_at"], owner="w1", now=NOW, lease=lease, tenant="acme"
        )
        assert isinstance(claimed, executions.Claimed)
        await transitions.finish(conn, claimed, owner="w1", status=ExecutionStatus.DEAD, now=NOW)
        [other] = await one_offs(conn, 1)  # the tenant's one live job
        with pytest.raises(QuotaExceeded, match="max_jobs"):
            await jobs.rerun_execution(conn, dead["id"], now=NOW)
        job = await pool.fetchrow("SELECT state FROM jobs WHERE id = $1", dead["job_id"])
        assert job["state"] == "completed"
        assert len(await rows(pool, dead["job_id"])) == 1, "nothing was written"
        await jobs.cancel_job(conn, other["job_id"], now=NOW)
        assert await jobs.rerun_execution(conn, dead["id"], now=NOW)


async def test_a_quota_check_reads_a_bound_and_counts_the_jobs_only_near_the_quota(
    pool: asyncpg.Pool,
) -> None:
    """`tenant_use` bounds a tenant's live jobs from above: raised by each create, left
    high by ends, set to the count only when it would fail the quota."""
    bound = "SELECT jobs FROM tenant_use WHERE tenant = 'acme'"
    live = "SELECT count(*) FROM jobs WHERE tenant = 'acme' AND state = 'active'"
    async with pool.acquire() as conn:
        await tenants.set_tenant_limit(conn, "acme", None, max_jobs=5)
        made = await one_offs(conn, 3)  # no bound yet: counted (1), then raised
        assert (await pool.fetchval(bound), await pool.fetchval(live)) == (3, 3)
        for execution in made[:2]:
            await jobs.cancel_job(conn, execution["job_id"], now=NOW)
        await one_offs(conn, 2)  # within the quota by the bound: not counted
        assert (await pool.fetchval(bound), await pool.fetchval(live)) == (5, 3)
        await one_offs(conn, 1)  # the bound (6) would fail it: counted
        assert (await pool.fetchval(bound), await pool.fetchval(live)) == (4, 4)
        await one_offs(conn, 1)
        with pytest.raises(QuotaExceeded, match="max_jobs=5"):
            await one_offs(conn, 1)  # counted, and over: nothing written
        assert (await pool.fetchval(bound), await pool.fetchval(live)) == (5, 5)


async def test_a_create_checked_in_its_own_statement_writes_only_within_the_bounds(
    pool: asyncpg.Pool,
) -> None:
    """The one-statement create (no transaction around it) checks the tenants' use bounds
    itself: one not kept yet, or one that would fail a quota here or with the other groups'
    use, fails the statement with nothing written (the caller then counts)."""
    bound = "SELECT jobs FROM tenant_use WHERE tenant = 'acme'"
    stored = "SELECT count(*) FROM jobs WHERE tenant = 'acme'"

    async def insert(conn: asyncpg.Connection, elsewhere: quotas.Elsewhere | None = None) -> None:
        job = NewJob(JobSpec(task="t", run_at=NOW + timedelta(minutes=1)), "acme", JobSource.API)
        await insert_jobs(conn, [job], shards=64, now=NOW, checked=True, elsewhere=elsewhere)

    async with pool.acquire() as conn:
        await tenants.set_tenant_limit(conn, "acme", None, max_jobs=3)
        with pytest.raises(quotas.ToCount):
            await insert(conn)  # no bound kept yet
        assert (await pool.fetchval(stored), await pool.fetchval(bound)) == (0, None)
        await one_offs(conn, 1)  # counted: the bound is 1
        await insert(conn)
        assert (await pool.fetchval(stored), await pool.fetchval(bound)) == (2, 2)
        with pytest.raises(quotas.ToCount):  # 3 here and 1 in another group: over 3
            await insert(conn, quotas.Elsewhere(used={"acme": (1, 0.0)}))
        with pytest.raises(quotas.ToCount):  # main's setting (2) rules, not this group's
            await insert(conn, quotas.Elsewhere(settings={"acme": (2, None)}))
        await insert(conn, quotas.Elsewhere(settings={"acme": (None, None)}))  # the default
        assert (await pool.fetchval(stored), await pool.fetchval(bound)) == (3, 3)
        with pytest.raises(quotas.ToCount):
            await insert(conn)
        assert (await pool.fetchval(stored), await pool.fetchval(bound)) == (3, 3)


async def advisory_lock_waits(pool: asyncpg.Pool) -> int:
    """Sessions of this database waiting for an advisory lock (the tenant's quota lock)."""
    return int(await pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock' AND wait_event = 'advisory'"))  # fmt: skip


async def test_two_creates_racing_for_a_tenants_last_place_get_one_each_way(
    pool: asyncpg.Pool,
) -> None:
    """The quota lock is taken after the insert (so creates do not wait on each other's
    inserts), yet the last place goes to one of two concurrent creates: the second counts
    the first's job once it commits, and is refused with nothing written; had the first
    rolled back, the second takes the place."""
    spec = JobSpec(task="t", run_at=NOW + timedelta(minutes=1))

    async def create(conn: asyncpg.Connection) -> uuid.UUID:
        return await jobs.create_job(
            conn, spec, tenant="acme", source=JobSource.API, shards=64, now=NOW
        )

    async with pool.acquire() as first, pool.acquire() as second:
        await tenants.set_tenant_limit(first, "acme", None, max_jobs=2)
        await one_offs(first, 1)
        for ends in ("commit", "rollback"):
            open_tx = first.transaction()
            await open_tx.start()
            taken = await create(first)  # the last place, not yet committed
            racing = asyncio.create_task(create(second))
            await until(lambda: advisory_lock_waits(pool), timeout=10,
                        what="the second create waiting for the quota lock")  # fmt: skip
            assert not racing.done(), "the second create waits for the first's commit"
            await (open_tx.commit() if ends == "commit" else open_tx.rollback())
            if ends == "commit":
                with pytest.raises(QuotaExceeded, match="max_jobs"):
                    await racing
                await jobs.cancel_job(first, taken, now=NOW)  # frees the place again
            else:
                assert await racing
        live = "SELECT count(*) FROM jobs WHERE tenant = 'acme' AND state = 'active'"
        assert await pool.fetchval(live) == 2
        assert await pool.fetchval("SELECT count(*) FROM jobs WHERE tenant = 'acme'") == 3


async def test_a_triggered_run_is_manual_and_so_is_its_retry(pool: asyncpg.Pool) -> None:
    lease = timedelta(seconds=30)
    async with pool.acquire() as conn:
        job_id = await jobs.create_job(
            conn, JobSpec(task="t", cron="0 0 1 1 *", retry={"max_attempts": 2}),
            tenant="acme", source=JobSource.API, shards=64, now=NOW,
        )  # fmt: skip
        manual_id = await jobs.trigger_job(conn, job_id, now=NOW)
        claimed = await transitions.claim(
            conn, manual_id, NOW, owner="w1", now=NOW, lease=lease, tenant="acme"
        )
        assert isinstance(claimed, executions.Claimed)
        later = NOW + timedelta(seconds=5)
        assert await transitions.finish(
            conn, claimed, owner="w1", status=ExecutionStatus.FAILED, now=NOW, retry_at=later
        )
    found = [(r["attempt"], r["status"], r["manual"]) for r in await rows(pool, job_id)]
    assert found == [(1, "failed", True), (2, "scheduled", True), (1, "scheduled", False)]


async def test_a_trigger_value_runs_once_however_often_it_is_handled(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        job_id = await jobs.create_job(
            conn, cron_spec("0 0 1 1 *"), tenant="acme", source=JobSource.CRD, shards=64,
            now=NOW, name="nightly",
        )  # fmt: skip
        # the value the ScheduledJob was created with: recorded, nothing runs
        assert await jobs.trigger_once(conn, job_id, "v0", now=NOW, run=False) is None
        assert await jobs.trigger_once(conn, job_id, "v0", now=NOW) is None
        first = await jobs.trigger_once(conn, job_id, "v1", now=NOW)
        again = await jobs.trigger_once(conn, job_id, "v1", now=NOW + timedelta(seconds=1))
        second = await jobs.trigger_once(conn, job_id, "v2", now=NOW + timedelta(seconds=2))
        assert first is not None and again is None and second is not None
        await jobs.set_paused(conn, job_id, True, now=NOW + timedelta(seconds=3))
        with pytest.raises(Conflict, match="paused: only an active job can be triggered"):
            await jobs.trigger_once(conn, job_id, "v3", now=NOW + timedelta(seconds=4))
        # refused, but handled: resuming the job does not run it later
        assert await jobs.trigger_once(conn, job_id, "v3", now=NOW) is None
    manual = [r["id"] for r in await rows(pool, job_id) if r["manual"]]
    assert manual == [first, second]
    assert await pool.fetchval("SELECT manual_trigger FROM jobs WHERE id = $1", job_id) == "v3"


async def test_each_change_of_a_scheduledjobs_job_tells_the_status_mirror_at_commit(
    pool: asyncpg.Pool, db_url: str
) -> None:
    # The operator's status mirror rewrites a ScheduledJob's status from the store when told;
    # a write of it that read the job just before a pause would otherwise stand for good (a
    # paused job has no more runs to report): found as `Suspended` left False in the e2e.
    listener = await connect(db_url)
    heard: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener("horae_job_events", lambda *a: heard.put_nowait(a[3]))

    async def told() -> list[str]:
        """What was said since the last call: up to a marker said after it (a listener
        hears notifications in their transactions' commit order)."""
        await pool.execute("SELECT pg_notify('horae_job_events', 'marker')")
        said: list[str] = []
        while (payload := await asyncio.wait_for(heard.get(), timeout=5)) != "marker":
            said.append(payload)
        return said

    try:
        async with pool.acquire() as conn:
            crd = await jobs.create_job(
                conn, cron_spec(), tenant="acme", source=JobSource.CRD, shards=64, now=NOW,
                name="nightly",
            )  # fmt: skip
            api = await cron_job(conn)
            await told()  # (whatever creating them said)
            by = JobSource.CRD
            await jobs.edit_job(conn, crd, cron_spec("*/20 * * * * *"), now=NOW, by=by)
            assert await told() == [str(crd)]
            await jobs.pause_job(conn, crd, now=NOW, by=by, reason="maintenance")
            assert await told() == [str(crd)]
            await jobs.pause_job(conn, crd, now=NOW, by=by, reason="still maintenance")
            assert await told() == [str(crd)]
            await jobs.resume_job(conn, crd, now=NOW, by=by)
            assert await told() == [str(crd)]
            with pytest.raises(Conflict):  # refused: nothing changed, nothing said
                await jobs.edit_job(conn, crd, cron_spec(), now=NOW)
            await jobs.cancel_job(conn, crd, now=NOW, by=by)
            assert await told() == [str(crd)]
            # the API's jobs have no resource to mirror to: nothing said
            await jobs.edit_job(conn, api, cron_spec("*/20 * * * * *"), now=NOW)
            await jobs.pause_job(conn, api, now=NOW)
            await jobs.resume_job(conn, api, now=NOW)
            await jobs.cancel_job(conn, api, now=NOW)
            assert await told() == []
    finally:
        await listener.close()


async def test_cronjob_style_history_keeps_the_newest_of_each_outcome_and_every_live_one(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        job_id = await cron_job(conn, "0 0 1 1 *")
    statuses = ["succeeded"] * 4 + ["failed", "dead", "skipped", "running", "queued"]
    for i, status in enumerate(statuses):
        due = NOW - timedelta(minutes=len(statuses) - i)
        await pool.execute(
            "INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at,"
            " attempt, job_version, status, finished_at, lease_owner, lease_until, enqueued_at)"
            " SELECT gen_random_uuid(), id, tenant, task, shard, $2, $2, 1, 1,"
            " $3::execution_status, CASE WHEN $4 THEN $2::timestamptz END, 'w', $2,"
            " CASE WHEN $3::text <> 'skipped' THEN $2::timestamptz END FROM jobs WHERE id = $1",
            job_id, due, status, status not in ("running", "queued"),
        )  # fmt: skip
    async with pool.acquire() as conn:
        kept = await reads.recent_of_job_by_outcome(conn, job_id, succeeded=2, failed=1)
        none = await reads.recent_of_job_by_outcome(conn, job_id, succeeded=0, failed=0)
        last_schedule, last_success = await reads.job_run_times(conn, job_id)
    assert sorted(r.status.value for r in kept) == [
        "queued", "running", "skipped", "succeeded", "succeeded"
    ]  # fmt: skip
    newest_ok = max(r.due_at for r in kept if r.status == ExecutionStatus.SUCCEEDED)
    assert newest_ok == NOW - timedelta(minutes=len(statuses) - 3)
    assert sorted(r.status.value for r in none) == ["queued", "running"]
    # the newest dispatched (the queued one), and the newest success
    assert last_schedule == NOW - timedelta(minutes=1) and last_success == newest_ok


async def test_a_held_buffer_one_occurrence_schedules_its_next_once_and_next_run_never_goes_back(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        spec = JobSpec(
            task="t", cron="*/10 * * * * *", concurrency_policy=ConcurrencyPolicy.BUFFER_ONE
        )
        job_id = await jobs.create_job(
            conn, spec, tenant="acme", source=JobSource.API, shards=64, now=NOW
        )
        shard = job_id.int % 64
        epoch = await dispatch.take_shard(conn, shard, "a", NOW)
        [waiting] = await dispatch.preload(conn, [shard], NOW + timedelta(minutes=1), 10)
        for _ in range(2):  # held, and looked at again: its next one is scheduled once
            await dispatch.record_dispatch(
                conn, {shard: dispatch.ShardDispatch(epoch, held=[waiting])}, NOW
            )
        [first, second] = await rows(pool, job_id)
        assert (first["status"], second["status"]) == ("scheduled", "scheduled")
        assert second["occurrence_at"] == first["occurrence_at"] + timedelta(seconds=10)
        nxt = await pool.fetchval("SELECT next_run_at FROM jobs WHERE id = $1", job_id)
        assert nxt == second["occurrence_at"]
        # The next one is skipped while the first waits (its own next one scheduled), then
        # the first runs: the job's next run stays the latest scheduled.
        [_, skipped] = await dispatch.preload(conn, [shard], NOW + timedelta(minutes=1), 10)
        skip = dispatch.Skip(skipped, "buffer_one", "one waits")
        await dispatch.record_dispatch(
            conn, {shard: dispatch.ShardDispatch(epoch, skipped=[skip])}, NOW
        )
        await dispatch.record_dispatch(conn, {shard: dispatch.ShardDispatch(epoch, [waiting])}, NOW)
    statuses = [(r["status"], r["error_kind"]) for r in await rows(pool, job_id)]
    # (The first, published, stays scheduled until a worker claims it.)
    assert statuses == [("scheduled", None), ("skipped", "buffer_one"), ("scheduled", None)]
    third = (await rows(pool, job_id))[2]["occurrence_at"]
    assert await pool.fetchval("SELECT next_run_at FROM jobs WHERE id = $1", job_id) == third


async def test_a_retry_policy_is_stored_as_its_fields_off_the_default_and_read_back_whole(
    pool: asyncpg.Pool,
) -> None:
    """Migration 023: the default policy costs a row 8 bytes; every read gives it in full,
    and so does the plain model an older release reads the column with."""
    default, own = RetryPolicy(), RetryPolicy(max_attempts=2, max_interval_seconds=9)
    async with pool.acquire() as conn:
        job_id = await cron_job(conn)
        stored = "SELECT retry_policy FROM jobs WHERE id = $1"
        assert await pool.fetchval(stored, job_id) == {}
        assert (await reads.get_job(conn, job_id)).spec.retry == default
        assert RetryPolicy.model_validate(await pool.fetchval(stored, job_id)) == default

        await jobs.edit_job(conn, job_id, cron_spec().model_copy(update={"retry": own}), now=NOW)
        assert await pool.fetchval(stored, job_id) == {"max_attempts": 2, "max_interval_seconds": 9}
        assert (await reads.get_job(conn, job_id)).spec.retry == own
        assert RetryPolicy.model_validate(await pool.fetchval(stored, job_id)) == own
        await jobs.edit_job(conn, job_id, cron_spec(), now=NOW)
        assert await pool.fetchval(stored, job_id) == {}

        # what the worker's claim and the reaper's expired lease carry: the whole policy
        run = await jobs.trigger_job(conn, job_id, now=NOW - timedelta(seconds=1))
        due_at = await pool.fetchval("SELECT due_at FROM executions WHERE id = $1", run)
        claimed = await transitions.claim(
            conn, run, due_at, owner="w1", now=NOW, lease=timedelta(seconds=1), tenant="acme"
        )
        assert isinstance(claimed, executions.Claimed)
        assert claimed.retry_policy == default.model_dump()
        later = NOW + timedelta(seconds=2)
        [expired] = await dispatch.expired_running(conn, [claimed.shard], later, 10)
        assert expired.retry_policy == default.model_dump()

        # a row written before migration 023 keeps every field, and reads the same
        await pool.execute(
            "UPDATE jobs SET retry_policy = $2 WHERE id = $1", job_id, default.model_dump()
        )
        assert (await reads.get_job(conn, job_id)).spec.retry == default

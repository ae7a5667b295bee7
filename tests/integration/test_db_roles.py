"""Each component's PostgreSQL role (migration 004) allows its own store calls and nothing
more: connected as the worker's role, jobs, tenants and executions cannot be read, no DDL
runs, and only the claim reaches a payload; the worker's, scheduler's, API's and
operator's real store calls succeed under their roles."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, date, datetime, timedelta

import asyncpg
import pytest
import pytest_asyncio

from horae.models import ConcurrencyPolicy, ExecutionStatus, JobSource, JobSpec
from horae.store import dispatch, executions, jobs, reads, tenants
from horae.store.db import connect
from horae.store.dispatch import ShardDispatch
from horae.store.executions import Answer, Beat, Claimed, ClaimRequest, Finish, Throttled
from horae.store.installation import read_installation
from horae.store.migrate import maintain_partitions, migrate
from tests.support import transitions
from tests.support.wait import until

# Each role's grants in one database (every group's roles: test_store_groups).
pytestmark = pytest.mark.one_group

SERVES = {"acme", "other"}
"""The tenants the worker role's claims serve here."""
NOW = datetime.now(UTC).replace(microsecond=0)
LEASE = timedelta(seconds=30)


@pytest_asyncio.fixture
async def as_role(role_urls: dict[str, str]) -> AsyncIterator[dict[str, asyncpg.Connection]]:
    """One connection per component, each as its own login role."""
    conns = {c: await connect(url) for c, url in role_urls.items()}
    yield conns
    for conn in conns.values():
        await conn.close()


async def api_job(conn: asyncpg.Connection, spec: JobSpec, tenant: str = "acme") -> uuid.UUID:
    return await jobs.create_job(
        conn, spec, tenant=tenant, source=JobSource.API, shards=64, now=NOW
    )


async def first_execution(pool: asyncpg.Pool, job_id: uuid.UUID) -> asyncpg.Record:
    return await pool.fetchrow(
        "SELECT * FROM executions WHERE job_id = $1 ORDER BY due_at LIMIT 1", job_id
    )


def request(row: asyncpg.Record) -> ClaimRequest:
    return ClaimRequest(row["id"], row["due_at"], row["tenant"])


async def claims(
    worker: asyncpg.Connection,
    requests: Sequence[ClaimRequest],
    owner: str = "w1",
    now: datetime = NOW,
) -> list[Answer]:
    """`requests` claimed for `owner` (at `now`, for LEASE) by a worker serving SERVES."""
    return await executions.claim_many(
        worker, requests, owner=owner, now=now, lease=LEASE, serves=SERVES
    )


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM jobs",
        "SELECT * FROM tenants",
        "SELECT id, due_at FROM executions",
        "SELECT * FROM installation",
        "SELECT * FROM shard_epochs",
        "UPDATE executions SET status = 'running'",
        "INSERT INTO tenants (name) VALUES ('x')",
    ],
)
async def test_the_worker_role_reads_and_writes_no_table(
    as_role: dict[str, asyncpg.Connection], sql: str
) -> None:
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
        await as_role["worker"].fetch(sql)


@pytest.mark.parametrize("component", ["api", "operator", "scheduler", "worker"])
@pytest.mark.parametrize(
    "ddl",
    [
        "CREATE TABLE stolen (x int)",
        "ALTER TABLE executions ADD COLUMN x int",
        "DROP TABLE jobs",
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "TRUNCATE jobs",
    ],
)
async def test_no_component_role_runs_ddl(
    as_role: dict[str, asyncpg.Connection], component: str, ddl: str
) -> None:
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await as_role[component].execute(ddl)


async def test_only_the_scheduler_role_makes_partitions_and_only_through_the_function(
    as_role: dict[str, asyncpg.Connection], pool: asyncpg.Pool
) -> None:
    for component in ("api", "operator", "worker"):
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await as_role[component].fetchval("SELECT horae_create_partition($1)", date(2032, 1, 1))
    later = NOW.date() + timedelta(days=30)
    done = await maintain_partitions(
        as_role["scheduler"], today=later, ahead_days=1, retention_days=3650
    )
    assert later in done.created
    # A partition made later is reached through its parent, with the parent's grants.
    due = datetime(later.year, later.month, later.day, 12, tzinfo=UTC)
    job_id = await api_job(as_role["api"], JobSpec(task="t", run_at=due))
    found = await dispatch.preload(as_role["scheduler"], [job_id.int % 64], due + LEASE, 10)
    assert [d.job_id for d in found] == [job_id]
    assert (
        await pool.fetchval(
            "SELECT tableoid::regclass::text FROM executions WHERE job_id = $1", job_id
        )
        == f"executions_{later:%Y%m%d}"
    )


async def test_the_worker_role_claims_beats_finishes_retries_and_hands_back(
    as_role: dict[str, asyncpg.Connection], pool: asyncpg.Pool
) -> None:
    worker = as_role["worker"]
    spec = JobSpec(task="t", run_at=NOW, payload={"secret": "acme's"})
    job_id = await api_job(as_role["api"], spec)
    row = await first_execution(pool, job_id)
    [claimed] = await claims(worker, [request(row)])
    assert isinstance(claimed, Claimed) and claimed.payload == {"secret": "acme's"}
    beat = await executions.heartbeat(worker, owner="w1", now=NOW, lease=LEASE, ids=[claimed.id])
    assert beat == Beat(frozenset([claimed.id]), [])
    retry_at = NOW + timedelta(seconds=5)
    assert await executions.finish_many(worker, [Finish(
        claimed, ExecutionStatus.FAILED, "Boom", "boom", retry_at=retry_at
    )], owner="w1", now=NOW) == [True]  # fmt: skip
    got = await pool.fetch("SELECT attempt, status FROM executions WHERE job_id = $1"
                           " ORDER BY attempt", job_id)  # fmt: skip
    assert [(r["attempt"], r["status"]) for r in got] == [(1, "failed"), (2, "scheduled")]
    assert await pool.fetchval("SELECT last_status FROM jobs WHERE id = $1", job_id) == "failed"
    retry = await pool.fetchrow("SELECT * FROM executions WHERE job_id = $1 AND attempt = 2",
                                job_id)  # fmt: skip
    [again] = await claims(worker, [request(retry)])
    assert isinstance(again, Claimed)
    assert await executions.release_running(worker, owner="w1", ids=[again.id], now=NOW) == 1
    assert await pool.fetchval("SELECT status FROM executions WHERE id = $1",
                               again.id) == "scheduled"  # fmt: skip
    # handed back as due as it was (never earlier; a microsecond later, a new key): its retry
    # time
    back = retry_at + timedelta(microseconds=1)
    [third] = await claims(worker, [ClaimRequest(again.id, back, "acme")])
    assert isinstance(third, Claimed)
    assert await transitions.finish(worker, third, owner="w1", status=ExecutionStatus.SUCCEEDED,
                                   now=NOW, result={"ok": 1})  # fmt: skip
    job = await pool.fetchrow("SELECT state, last_status FROM jobs WHERE id = $1", job_id)
    assert (job["state"], job["last_status"]) == ("completed", "succeeded")


async def test_the_worker_role_reaches_no_payload_but_its_claims(
    as_role: dict[str, asyncpg.Connection], pool: asyncpg.Pool
) -> None:
    worker = as_role["worker"]
    mine = await api_job(as_role["api"], JobSpec(task="t", run_at=NOW, payload={"a": 1}))
    theirs = await api_job(as_role["api"], JobSpec(task="t", run_at=NOW, payload={"b": 2}),
                           tenant="other")  # fmt: skip
    their_row = await first_execution(pool, theirs)
    # Their execution, already claimed by another worker: a claim gets nothing.
    [other] = await claims(worker, [request(their_row)], owner="w-other")
    assert isinstance(other, Claimed)
    assert await claims(worker, [request(their_row)]) == [None]
    # Nor do a heartbeat, an outcome or a hand-back under another owner's name it guesses wrong.
    beat = await executions.heartbeat(worker, owner="w1", now=NOW, lease=LEASE, ids=[other.id])
    assert beat == Beat(frozenset(), [])
    assert await executions.finish_many(worker, [Finish(other, ExecutionStatus.SUCCEEDED)],
                                        owner="w1", now=NOW) == [False]  # fmt: skip
    assert await executions.release_running(worker, owner="w1", ids=[other.id], now=NOW) == 0
    # An id it makes up, or a real id with the wrong due time, claims nothing either.
    made_up = [ClaimRequest(uuid.uuid4(), NOW, "other"),
               ClaimRequest(their_row["id"], NOW + timedelta(days=1), "other")]  # fmt: skip
    assert await claims(worker, made_up) == [None, None]
    mine_row = await first_execution(pool, mine)
    [claimed] = await claims(worker, [request(mine_row)])
    assert isinstance(claimed, Claimed) and claimed.payload == {"a": 1}
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await worker.fetch("SELECT payload FROM jobs WHERE id = $1", theirs)


async def test_the_worker_role_is_held_to_the_rows_tenant_limit(
    as_role: dict[str, asyncpg.Connection], pool: asyncpg.Pool
) -> None:
    await tenants.set_tenant_limit(as_role["api"], "acme", 1)
    ids = [await api_job(as_role["api"], JobSpec(task="t", run_at=NOW)) for _ in range(2)]
    rows = [await first_execution(pool, i) for i in ids]
    # Messages that name another tenant are refused, the rows untouched (horae_claim).
    forged = [ClaimRequest(r["id"], r["due_at"], "other") for r in rows]
    answers = await claims(as_role["worker"], forged)
    assert [type(a).__name__ for a in answers] == ["Refused", "Refused"]
    honest = [ClaimRequest(r["id"], r["due_at"], "acme") for r in rows]
    answers = await claims(as_role["worker"], honest)
    assert sorted(type(a).__name__ for a in answers) == ["Claimed", "Throttled"]
    throttled = next(a for a in answers if isinstance(a, Throttled))
    assert NOW + timedelta(seconds=1) <= throttled.due_at <= NOW + timedelta(seconds=1.5)


async def test_the_worker_role_schedules_the_next_occurrence_of_an_unrecorded_claim(
    as_role: dict[str, asyncpg.Connection], pool: asyncpg.Pool
) -> None:
    job_id = await api_job(as_role["api"], JobSpec(task="t", cron="*/10 * * * * *"))
    row = await first_execution(pool, job_id)
    [claimed] = await claims(as_role["worker"], [request(row)])
    assert isinstance(claimed, Claimed)
    nxt = await pool.fetch("SELECT occurrence_at FROM executions WHERE job_id = $1"
                           " AND status = 'scheduled'", job_id)  # fmt: skip
    assert [r["occurrence_at"] for r in nxt] == [row["occurrence_at"] + timedelta(seconds=10)]
    assert await pool.fetchval("SELECT next_run_at FROM jobs WHERE id = $1",
                               job_id) == nxt[0]["occurrence_at"]  # fmt: skip


async def test_the_scheduler_role_dispatches_reaps_and_schedules_next(
    as_role: dict[str, asyncpg.Connection], pool: asyncpg.Pool
) -> None:
    scheduler = as_role["scheduler"]
    assert (await read_installation(scheduler)).shards == 64
    job_id = await api_job(as_role["api"], JobSpec(task="t", cron="*/10 * * * * *"))
    shard = job_id.int % 64
    epoch = await dispatch.take_shard(scheduler, shard, "s1", NOW)
    [due] = await dispatch.preload(scheduler, [shard], NOW + timedelta(minutes=1), 10)
    queued, fenced = await dispatch.record_dispatch(
        scheduler, {shard: ShardDispatch(epoch, [due])}, NOW
    )
    assert (queued, fenced) == (1, set())
    # Published, left scheduled: what the reaper looks up (and republishes when unclaimed).
    assert await dispatch.still_scheduled(scheduler, [(due.id, due.due_at, shard)]) == [due]
    # Rows an earlier release marked queued: none here, and the reaper may touch them.
    assert await dispatch.stale_queued(scheduler, [shard], NOW + timedelta(hours=1), 10) == []
    await dispatch.touch_queued(scheduler, shard, epoch, [due], NOW)
    # claimed once due (one claimed ahead, unstarted, is given back instead: the next test)
    request = ClaimRequest(due.id, due.due_at, due.tenant)
    [claimed] = await claims(as_role["worker"], [request], now=due.due_at)
    assert isinstance(claimed, Claimed)
    lapsed = due.due_at + LEASE * 2
    [expired] = await dispatch.expired_running(scheduler, [shard], lapsed, 10)
    assert await dispatch.lose_lease(scheduler, expired, epoch=epoch, now=lapsed,
                                       retry_at=lapsed + LEASE)  # fmt: skip
    assert await pool.fetchval("SELECT status FROM executions WHERE id = $1", due.id) == "failed"
    assert await dispatch.live_of_jobs(scheduler, [job_id]) == []
    with pytest.raises(asyncpg.InsufficientPrivilegeError):  # UPDATE is granted by column
        await scheduler.execute("UPDATE jobs SET payload = '{}' WHERE id = $1", job_id)
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await scheduler.fetch("SELECT * FROM tenants")


async def test_the_scheduler_role_gives_back_a_claim_ahead_whose_worker_never_recorded_it(
    as_role: dict[str, asyncpg.Connection], pool: asyncpg.Pool
) -> None:
    # Claimed by the worker role a minute before its due time, then its lease (from the due
    # time) runs out with no outcome: the reaper's statement, as the scheduler role, makes it
    # `scheduled` again as it was due, with no owner and no attempt used; fenced by the epoch.
    scheduler = as_role["scheduler"]
    job_id = await api_job(as_role["api"], JobSpec(task="t", run_at=NOW + timedelta(minutes=1)))
    row = await first_execution(pool, job_id)
    epoch = await dispatch.take_shard(scheduler, row["shard"], "s1", NOW)
    [claimed] = await claims(as_role["worker"], [request(row)])
    assert isinstance(claimed, Claimed)
    held = await pool.fetchrow("SELECT * FROM executions WHERE id = $1", row["id"])
    assert (held["status"], held["started_at"]) == ("running", None)
    assert held["lease_until"] == row["due_at"] + LEASE, "a claim ahead leases from its due time"
    lapsed = row["due_at"] + LEASE + timedelta(seconds=1)
    shard = row["shard"]
    assert await dispatch.return_unstarted(scheduler, {shard: epoch}, lapsed - LEASE) == 0
    assert await dispatch.return_unstarted(scheduler, {shard: epoch + 1}, lapsed) == 0, "fenced"
    assert await dispatch.expired_running(scheduler, [shard], lapsed, 10) == [], (
        "an unstarted claim is no failed attempt"
    )
    assert await dispatch.return_unstarted(scheduler, {shard: epoch}, lapsed) == 1
    again = await pool.fetchrow("SELECT * FROM executions WHERE id = $1", row["id"])
    assert (again["status"], again["lease_owner"], again["lease_until"], again["started_at"],
            again["due_at"], again["attempt"]) == ("scheduled", None, None, None,
                                                   row["due_at"], 1)  # fmt: skip


async def test_a_claim_ahead_its_worker_did_not_promise_goes_back_once_past_the_grace(
    as_role: dict[str, asyncpg.Connection], pool: asyncpg.Pool
) -> None:
    # Four executions due 1.5 s from now, each claimed ahead by another worker (as the worker
    # role): w-silent promised once, then fell silent; w-alive promises past the due time;
    # w-old, of an earlier release, never promises; w-restarted starts up again. Judged by
    # the reaper (as the scheduler role) and by Postgres's clock, with a grace of 0.5 s.
    scheduler, worker = as_role["scheduler"], as_role["worker"]
    grace, due = timedelta(seconds=0.5), datetime.now(UTC) + timedelta(seconds=1.5)
    owners = ["w-silent", "w-alive", "w-old", "w-restarted"]
    rows = {}
    for owner in owners:
        job_id = await api_job(as_role["api"], JobSpec(task="t", run_at=due))
        rows[owner] = await first_execution(pool, job_id)
        now = datetime.now(UTC)
        [claimed] = await claims(worker, [request(rows[owner])], owner=owner, now=now)
        assert isinstance(claimed, Claimed)
    epochs = {}
    for row in rows.values():
        epochs[row["shard"]] = await dispatch.take_shard(scheduler, row["shard"], "s1", NOW)
    silent = await executions.promise(worker, owner="w-silent", ahead=timedelta(), grace=grace)
    assert silent.alive_until < rows["w-silent"]["due_at"]
    await executions.promise(worker, owner="w-alive", ahead=timedelta(seconds=3), grace=grace)
    assert await executions.forget_claims_ahead(worker, "w-restarted") == 1

    async def status(owner: str) -> tuple[str, str | None]:
        got = await pool.fetchrow(
            "SELECT status::text, lease_owner FROM executions WHERE id = $1", rows[owner]["id"]
        )
        return got["status"], got["lease_owner"]

    # Within the grace of the due time, nothing goes back.
    assert await dispatch.return_unpromised(scheduler, epochs, timedelta(minutes=2)) == 0
    assert await status("w-restarted") == ("scheduled", None), "its new process forgot it"

    async def past_grace() -> bool:
        return datetime.now(UTC) > due + grace + timedelta(seconds=0.2)

    await until(past_grace, timeout=10, interval=0.1, what="the grace of the due time passing")
    stale = {s: e + 1 for s, e in epochs.items()}
    assert await dispatch.return_unpromised(scheduler, stale, timedelta(minutes=2)) == 0, "fenced"
    assert await dispatch.return_unpromised(scheduler, epochs, timedelta(minutes=2)) == 1
    assert await status("w-silent") == ("scheduled", None)
    assert await status("w-alive") == ("running", "w-alive")
    assert await status("w-old") == ("running", "w-old"), "no promise: left to its lease"
    back = await pool.fetchrow("SELECT * FROM executions WHERE id = $1", rows["w-silent"]["id"])
    assert back["due_at"] == rows["w-silent"]["due_at"] + timedelta(microseconds=1), "a new key"
    assert back["attempt"] == 1
    # Woken, the silent worker promises again and asks which of its claims it still holds:
    # not that one (given back), so it does not start it; the live worker still holds its own.
    woken = await executions.promise(
        worker, owner="w-silent", ahead=timedelta(seconds=1), grace=grace,
        claims=[(rows["w-silent"]["id"], rows["w-silent"]["due_at"])],
    )  # fmt: skip
    assert woken.mine == frozenset() and woken.alive_until > due
    alive = await executions.promise(
        worker, owner="w-alive", ahead=timedelta(seconds=1), grace=grace,
        claims=[(rows["w-alive"]["id"], rows["w-alive"]["due_at"])],
    )  # fmt: skip
    assert alive.mine == {rows["w-alive"]["id"]}
    # Promised past its due time now: never given back by this path again.
    assert await dispatch.return_unpromised(scheduler, epochs, timedelta(minutes=2)) == 0


async def test_the_api_role_runs_the_job_lifecycle(
    as_role: dict[str, asyncpg.Connection], pool: asyncpg.Pool
) -> None:
    api = as_role["api"]
    job_id = await api_job(api, JobSpec(task="t", cron="0 * * * *"), tenant="acme")
    await jobs.edit_job(api, job_id, JobSpec(task="t", cron="30 * * * *"), now=NOW,
                        tenant="acme")  # fmt: skip
    await jobs.pause_job(api, job_id, now=NOW, tenant="acme")
    await jobs.resume_job(api, job_id, now=NOW, tenant="acme")
    triggered = await jobs.trigger_job(api, job_id, now=NOW, tenant="acme")
    row = await pool.fetchrow("SELECT * FROM executions WHERE id = $1", triggered)
    [claimed] = await claims(as_role["worker"], [request(row)])
    assert isinstance(claimed, Claimed)
    await transitions.finish(as_role["worker"], claimed, owner="w1",
                            status=ExecutionStatus.FAILED, now=NOW)  # fmt: skip
    assert await jobs.rerun_execution(api, triggered, now=NOW, tenant="acme")
    assert [r.id for r in await reads.list_jobs(api, "acme", after=None, limit=10)] == [job_id]
    assert len(await reads.for_job(api, job_id)) >= 3
    execution = await reads.get_execution(api, triggered, "acme")
    assert execution is not None and execution.status == "failed"
    assert (await tenants.set_tenant_limit(api, "acme", 5)).max_running == 5
    assert await jobs.cancel_job(api, job_id, now=NOW, tenant="acme")
    assert await pool.fetchval("SELECT state FROM jobs WHERE id = $1", job_id) == "cancelled"
    with pytest.raises(asyncpg.InsufficientPrivilegeError):  # a job stays in its tenant
        await api.execute("UPDATE jobs SET tenant = 'other' WHERE id = $1", job_id)
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await api.execute("DELETE FROM executions")


async def test_the_operator_role_keeps_scheduled_jobs(
    as_role: dict[str, asyncpg.Connection], pool: asyncpg.Pool
) -> None:
    operator = as_role["operator"]
    shards = (await read_installation(operator)).shards
    job_id = await jobs.create_job(operator, JobSpec(task="t", cron="0 * * * *"), tenant="ns",
                                   source=JobSource.CRD, shards=shards, now=NOW,
                                   name="nightly")  # fmt: skip
    await jobs.edit_job(operator, job_id, JobSpec(task="t", cron="5 * * * *"), now=NOW,
                        by=JobSource.CRD)  # fmt: skip
    await jobs.set_paused(operator, job_id, True, now=NOW)
    await jobs.set_paused(operator, job_id, False, now=NOW)
    assert await reads.find_live_crd_job(operator, "ns", "nightly") == job_id
    assert [r.id for r in await reads.live_crd_jobs(operator)] == [job_id]
    assert await reads.existing_ids(operator, [job_id, uuid.uuid4()]) == {job_id}
    assert await reads.recent_of_job(operator, job_id, 10) is not None
    await jobs.cancel_crd_namesake(operator, "ns", "nightly", keep=uuid.uuid4(), now=NOW)
    assert await pool.fetchval("SELECT state FROM jobs WHERE id = $1", job_id) == "cancelled"
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await operator.fetch("SELECT * FROM tenants")


async def test_migrating_another_database_of_the_cluster_finds_the_roles_there(
    db_url: str,
) -> None:
    # The roles exist (the session's template made them): a fresh database of the same
    # cluster migrates, and its own objects are granted to the same roles.
    admin = await asyncpg.connect(db_url)
    name = f"horae_second_{uuid.uuid4().hex[:8]}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        second = db_url.rsplit("/", 1)[0] + "/" + name
        assert "004_roles.sql" in await migrate(second)
        conn = await asyncpg.connect(second)
        try:
            granted = await conn.fetchval(
                "SELECT has_function_privilege('horae_worker',"
                " 'horae_claim(uuid[], timestamptz[], text[], text[], text, timestamptz, interval,"
                " interval)',"
                " 'EXECUTE')"
            )
            assert granted is True
            assert (
                await conn.fetchval("SELECT has_table_privilege('horae_worker', 'jobs', 'SELECT')")
                is False
            )
        finally:
            await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def test_a_retry_announced_by_the_workers_function_carries_no_execution_id(
    as_role: dict[str, asyncpg.Connection], pool: asyncpg.Pool, db_url: str
) -> None:
    """Any role may LISTEN: a shard's NOTIFY once carried each new execution's id, enough for
    a stolen worker credential to claim another tenant's execution first (migration 004)."""
    worker = as_role["worker"]
    job_id = await api_job(as_role["api"], JobSpec(task="t", run_at=NOW))
    row = await first_execution(pool, job_id)
    heard: list[str] = []
    listener = await connect(db_url)
    await listener.add_listener(f"horae_shard_{row['shard']}", lambda *a: heard.append(a[3]))
    try:
        [claimed] = await claims(worker, [request(row)])
        assert isinstance(claimed, Claimed)
        retry_at = NOW + timedelta(seconds=5)
        finish = Finish(claimed, ExecutionStatus.FAILED, "Boom", "boom", retry_at=retry_at)
        assert await executions.finish_many(worker, [finish], owner="w1", now=NOW) == [True]
        retry = await pool.fetchrow(
            "SELECT id, due_at FROM executions WHERE job_id = $1 AND attempt = 2", job_id
        )

        async def announced() -> bool:
            return bool(heard)

        await until(announced, timeout=5, what="the retry's NOTIFY")
    finally:
        await listener.close()
    notice = dispatch.parse_notify(heard[0])
    assert notice is not None
    due, floor = notice.key
    assert due == retry["due_at"] and floor <= retry["id"]
    assert floor.int >> 80 == retry["id"].int >> 80  # the id's millisecond, no more
    assert all(str(retry["id"]) not in payload for payload in heard)


async def test_a_replace_round_ends_what_it_replaces_under_the_schedulers_role(
    as_role: dict[str, asyncpg.Connection], pool: asyncpg.Pool
) -> None:
    """A queued predecessor is cancelled and never claimed; a running one is marked and
    answered with the worker holding it (to be told now; its heartbeat finds the mark too);
    lost with that worker, it ends cancelled rather than retried."""
    scheduler, worker = as_role["scheduler"], as_role["worker"]
    spec = JobSpec(task="t", cron="0 0 1 1 *", concurrency_policy=ConcurrencyPolicy.REPLACE)
    job_id = await api_job(as_role["api"], spec)
    shard = job_id.int % 64
    epoch = await dispatch.take_shard(scheduler, shard, "s1", NOW)
    running, queued, new = [
        await jobs.trigger_job(as_role["api"], job_id, now=NOW + timedelta(seconds=s))
        for s in (0, 1, 2)
    ]
    dues = {d.id: d for d in await dispatch.preload(scheduler, [shard], NOW + LEASE, 10)}
    [claimed] = await claims(worker, [ClaimRequest(running, dues[running].due_at, "acme")])
    assert isinstance(claimed, Claimed)
    assert await transitions.record_published(scheduler, shard, epoch, [dues[queued]], NOW) == 1

    replaced = [(running, dues[running].due_at), (queued, dues[queued].due_at)]
    async with dispatch.fenced(scheduler, {shard: epoch}) as held:
        recorded = await dispatch.record_round(
            scheduler, {shard: ShardDispatch(epoch, [dues[new]], cancel=replaced)}, NOW
        )
    assert held == {shard}
    assert (recorded.published, dict(recorded.stop)) == (1, {"w1": [running]})
    ended = await pool.fetchrow("SELECT * FROM executions WHERE id = $1", queued)
    assert (ended["status"], ended["error_kind"], ended["error_message"]) == (
        "cancelled",
        "cancel_requested",
        dispatch.REPLACED,
    )
    assert await claims(worker, [ClaimRequest(queued, dues[queued].due_at, "acme")]) == [None]
    beat = await executions.heartbeat(worker, owner="w1", now=NOW, lease=LEASE, ids=[running])
    assert beat.cancel == [running]

    [expired] = await dispatch.expired_running(scheduler, [shard], NOW + LEASE * 2, 10)
    lost = await dispatch.lose_lease(
        scheduler, expired, epoch=epoch, now=NOW + LEASE * 2, retry_at=NOW + LEASE * 3
    )
    assert lost == ExecutionStatus.CANCELLED
    row = await pool.fetchrow("SELECT * FROM executions WHERE id = $1", running)
    assert (row["status"], row["error_kind"]) == ("cancelled", "cancel_requested")
    attempts = await pool.fetchval(
        "SELECT count(*) FROM executions WHERE job_id = $1 AND occurrence_at = $2",
        job_id,
        row["occurrence_at"],
    )
    assert attempts == 1, "a replaced execution lost with its worker is not retried"

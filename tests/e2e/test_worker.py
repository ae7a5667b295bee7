"""Workers as real processes: duplicates, retries, permanent failures, dead letters,
cancellation, graceful and ungraceful stops."""

from __future__ import annotations

import asyncio
import itertools
import signal
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from horae import broker
from horae.models import ExecutionMessage, JobSource, JobSpec, RetryPolicy
from horae.store import jobs, tenants
from tests.support.invocations import invocations
from tests.support.kube import free_port
from tests.support.metrics import scrape, value
from tests.support.processes import HAS_FAKETIME, Component, Processes, clock_offset_env
from tests.support.queues import ready_messages
from tests.support.scheduling import drain
from tests.support.store_rows import StoreRows
from tests.support.wait import until, until_ready
from tests.support.webhook import webhook_receiver

TASKS = "tests/e2e/tasks.py"
pytestmark = pytest.mark.usefixtures("shared_default_pool")


async def create(stored: StoreRows, spec: JobSpec, *, due_in: float = 1.0) -> asyncpg.Record:
    now = datetime.now(UTC)
    spec = spec.model_copy(update={"run_at": now + timedelta(seconds=due_in)})
    job_id = await stored.create_job(spec, tenant="t", source=JobSource.API, now=now)
    return await stored.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id)


async def terminal(stored: StoreRows, job_id: object, count: int, timeout: float = 40) -> list:
    async def done() -> list | None:
        rows = await stored.fetch(
            "SELECT * FROM executions WHERE job_id = $1 ORDER BY attempt", job_id
        )
        finished = [r for r in rows if r["finished_at"] is not None]
        return rows if len(finished) >= count and all(r["finished_at"] for r in rows) else None

    return await until(done, timeout=timeout, interval=0.2, what=f"{count} finished attempts")


async def echo_message(stored: StoreRows, due_in: float) -> tuple[asyncpg.Record, ExecutionMessage]:
    """An `e2e.echo` one-off due in `due_in` seconds: its execution row and the message the
    scheduler would publish for it."""
    job = await create(stored, JobSpec(task="e2e.echo", run_at=datetime.now(UTC)), due_in=due_in)
    row = await stored.fetchrow("SELECT * FROM executions WHERE job_id = $1", job["id"])
    msg = ExecutionMessage(
        execution_id=row["id"], job_id=job["id"], task="e2e.echo", tenant="t",
        due_at=row["due_at"], occurrence_at=row["occurrence_at"], attempt=1,
    )  # fmt: skip
    return row, msg


async def publish(broker_url: str, prefix: str, *messages: ExecutionMessage) -> None:
    """Each message on its own, as the scheduler publishes them."""
    connection = await broker.connect(broker_url)
    try:
        publisher = broker.Publisher(connection, broker.Names(prefix))
        await publisher.start()
        for msg in messages:
            await publisher.publish_batch([msg])
    finally:
        await connection.close()


async def test_the_same_message_twice_runs_the_handler_once(
    processes: Processes,
    stored: StoreRows,
    broker_url: str,
    broker_prefix: str,
    tmp_path: Path,
    shared_default_pool: str,
) -> None:
    log = tmp_path / "calls.jsonl"
    processes.start("worker", "worker", "--tasks", TASKS, env={"HORAE_TEST_LOG": str(log)})
    row, msg = await echo_message(stored, due_in=0)
    await publish(broker_url, broker_prefix, msg, msg)  # the same execution twice
    [done] = await terminal(stored, row["job_id"], 1)
    assert done["status"] == "succeeded"

    async def queue_empty() -> bool:
        return not await drain(broker_url, shared_default_pool)

    await until(queue_empty, timeout=10, what="both messages acked")
    assert len(invocations(log)) == 1


async def claimed_ahead(stored: StoreRows, row: asyncpg.Record) -> asyncpg.Record:
    """`row`'s execution once a worker has claimed it ahead of its due time (before that, a
    failure: the test is too slow to see it)."""

    async def running() -> asyncpg.Record | None:
        got = await stored.fetchrow("SELECT * FROM executions WHERE id = $1", row["id"])
        return got if got["status"] == "running" else None

    held = await until(running, timeout=10, interval=0.1, what="the claim ahead")
    assert datetime.now(UTC) < row["due_at"], "claimed only once due"
    return held


async def published_and_claimed_ahead(
    processes: Processes, stored: StoreRows, env: dict[str, str]
) -> tuple[Component, asyncpg.Record]:
    """A scheduler publishing 8 s ahead, a worker (`env`), and an `e2e.echo` one-off due in
    10 s, once that worker has claimed it ahead: the worker, and the execution's row as
    created."""
    processes.start("scheduler", "scheduler", env={"HORAE_DISPATCH_LEAD_SECONDS": "8"})
    worker = processes.start("worker", "worker", "--tasks", TASKS, env=env)
    job = await create(stored, JobSpec(task="e2e.echo", run_at=datetime.now(UTC)), due_in=10)
    row = await stored.fetchrow("SELECT * FROM executions WHERE job_id = $1", job["id"])
    held = await claimed_ahead(stored, row)
    assert held["lease_owner"] == worker.identity
    return worker, row


async def test_a_message_published_before_its_due_time_is_claimed_at_once_and_run_when_due(
    processes: Processes,
    stored: StoreRows,
    broker_url: str,
    broker_prefix: str,
    tmp_path: Path,
    shared_default_pool: str,
) -> None:
    # The scheduler publishes up to its dispatch lead early (a scheduler whose clock runs
    # ahead, earlier still): the worker claims the execution as the message arrives, its
    # lease counted from the due time, and acks the message, so that what a burst due at one
    # instant costs is spent before it; the handler starts once due by Postgres's clock, and
    # that start is what the row records.
    log = tmp_path / "calls.jsonl"
    processes.start("worker", "worker", "--tasks", TASKS, env={"HORAE_TEST_LOG": str(log)})
    row, msg = await echo_message(stored, due_in=10)
    await publish(broker_url, broker_prefix, msg)
    held = await claimed_ahead(stored, row)
    assert held["started_at"] is None, "a claim ahead is not a start"
    assert held["lease_until"] == row["due_at"] + timedelta(seconds=30), "lease from the due time"

    async def acked() -> bool:  # while it waits, its message holds no prefetch slot
        ready = await ready_messages(broker_url, shared_default_pool)
        return ready == 0 and await asyncio.to_thread(unacked, broker_url, shared_default_pool) == 0

    await until(acked, timeout=8, interval=0.5, what="the message acked at the claim")
    assert datetime.now(UTC) < row["due_at"] and invocations(log) == [], "started early"
    [done] = await terminal(stored, row["job_id"], 1)
    assert done["status"] == "succeeded"
    [call] = invocations(log)
    lag = call["at"] - row["due_at"].timestamp()
    # (the worker reads Postgres's clock to within half a loopback round trip)
    assert -0.005 <= lag < 1.0, f"handler started {lag:.3f} s after its due time"
    recorded = done["started_at"].timestamp() - call["at"]
    assert -0.05 <= recorded <= 0.05, f"recorded start {recorded:.3f} s off the handler's"


async def ran_once_by(
    stored: StoreRows, row: asyncpg.Record, log: Path, worker: Component
) -> float:
    """Once the execution of `row` has ended: that it succeeded at its first attempt, its
    only handler call `worker`'s; how late it started, in seconds."""
    [done] = await terminal(stored, row["job_id"], 1, timeout=40)
    assert (done["status"], done["attempt"]) == ("succeeded", 1)
    assert [c["worker"] for c in invocations(log)] == [worker.identity]
    return float((done["started_at"] - row["due_at"]).total_seconds())


async def run_elsewhere_while_frozen(
    processes: Processes, stored: StoreRows, sleeper: Component, row: asyncpg.Record,
    env: dict[str, str], until_dt: datetime | None = None,
) -> tuple[Component, asyncpg.Record]:  # fmt: skip
    """Freeze `sleeper` (SIGSTOP), start another worker (`env`), and wake `sleeper` once the
    execution of `row` has ended (and `until_dt` has passed): that worker, and the
    execution's row, which succeeded at its first attempt."""
    sleeper.signal(signal.SIGSTOP)
    try:
        heir = processes.start("worker", "worker", "--tasks", TASKS, env=env)
        [done] = await terminal(stored, row["job_id"], 1, timeout=40)
        if until_dt is not None:
            await asyncio.sleep(max(0.0, (until_dt - datetime.now(UTC)).total_seconds()))
    finally:
        sleeper.signal(signal.SIGCONT)
    assert (done["status"], done["attempt"]) == ("succeeded", 1)
    return heir, done


async def test_a_worker_killed_just_before_the_due_time_of_its_claim_ahead_leaves_it_within_seconds(
    processes: Processes, stored: StoreRows, tmp_path: Path
) -> None:
    # Killed after claiming ahead, 0.25 s before the due time: no handler began, though the
    # store cannot know that. None of its promises (every 0.2 s) reached the due time (a
    # promise covers only what was due when it was written), so once the due time is the
    # grace (1.5 s) past its last promise, the reaper makes the execution scheduled again,
    # long before its lease (30 s, from the due time) would run out, and another worker
    # runs it: one attempt, one handler call, the heir's. (While promises reached 0.5 s
    # ahead, an execution due within that reach of the kill waited for its lease.)
    log = tmp_path / "calls.jsonl"
    env = {"HORAE_TEST_LOG": str(log)}
    victim, row = await published_and_claimed_ahead(processes, stored, env)
    port = free_port()
    heir = processes.start("worker", "worker", "--tasks", TASKS,
                           env=env | {"HORAE_METRICS_PORT": str(port)})  # fmt: skip
    assert (await until_ready(port)).startswith("consuming")
    await asyncio.sleep((row["due_at"] - datetime.now(UTC)).total_seconds() - 0.25)
    victim.kill()
    assert datetime.now(UTC) < row["due_at"], "killed only once due: the test is too slow"
    late = await ran_once_by(stored, row, log, heir)
    assert 1.5 <= late < 5, f"started {late:.2f} s after its due time"


async def test_a_worker_killed_and_restarted_in_place_runs_its_claim_ahead_on_time(
    processes: Processes, stored: StoreRows, tmp_path: Path
) -> None:
    # The same pod's next process (the same identity) gives back what the killed one claimed
    # ahead as it starts (no process of it can start those now): scheduled again, published
    # at its due time and run then, once.
    log = tmp_path / "calls.jsonl"
    env = {"HORAE_TEST_LOG": str(log)}
    victim, row = await published_and_claimed_ahead(processes, stored, env)
    victim.kill()
    again = processes.start("worker", "worker", "--tasks", TASKS, env=env,
                            identity=victim.identity)  # fmt: skip
    late = await ran_once_by(stored, row, log, again)
    assert 0 <= late < 1.5, f"started {late:.2f} s after its due time"
    assert "claimed ahead: scheduled again" in again.log()


async def test_a_worker_frozen_across_the_due_time_of_a_claim_ahead_never_starts_it_on_waking(
    processes: Processes, stored: StoreRows, tmp_path: Path
) -> None:
    # Frozen (SIGSTOP) after claiming ahead until past the due time and the grace, well
    # within the lease: its promises stop, the reaper gives the execution to another worker,
    # which runs it. Woken, the frozen worker has no promise that reached the due time in
    # time: it promises again, finds the claim no longer its own, and does not start it.
    log = tmp_path / "calls.jsonl"
    env = {"HORAE_TEST_LOG": str(log)}
    sleeper, row = await published_and_claimed_ahead(processes, stored, env)
    heir, done = await run_elsewhere_while_frozen(processes, stored, sleeper, row, env)
    assert (done["started_at"] - row["due_at"]).total_seconds() < 5

    async def woken() -> bool:
        return "stood still" in sleeper.log() or len(invocations(log)) > 1

    await until(woken, timeout=10, what="the woken worker letting the execution go")
    assert [c["worker"] for c in invocations(log)] == [heir.identity]


async def test_a_worker_frozen_past_the_lease_of_a_claim_ahead_never_starts_it_on_waking(
    processes: Processes, stored: StoreRows, tmp_path: Path
) -> None:
    # Frozen past the lease too (3 s here): woken, the worker finds its lease gone by its own
    # reckoning and gives the execution back (a no-op: another worker has run it).
    log = tmp_path / "calls.jsonl"
    env = {"HORAE_TEST_LOG": str(log), "HORAE_EXECUTION_LEASE_SECONDS": "3"}
    sleeper, row = await published_and_claimed_ahead(processes, stored, env)
    heir, _ = await run_elsewhere_while_frozen(
        processes, stored, sleeper, row, env, until_dt=row["due_at"] + timedelta(seconds=4)
    )  # the lease run out

    async def woken() -> bool:  # its log says it gave the execution back (not started)
        return "given back" in sleeper.log() or len(invocations(log)) > 1

    await until(woken, timeout=10, what="the woken worker giving the execution back")
    assert [c["worker"] for c in invocations(log)] == [heir.identity]


async def test_a_worker_frozen_while_a_claim_ahead_waits_for_a_slot_never_starts_it_on_waking(
    processes: Processes, stored: StoreRows, tmp_path: Path
) -> None:
    # One slot, 3 s leases: a slow handler holds the slot past the due time of an execution
    # claimed ahead, which waits for it, its lease kept by heartbeats. Frozen meanwhile past
    # that lease, the worker leaves the execution to the reaper (an unstarted claim ahead
    # whose lease ran out), which gives it to another worker. Woken, the slot free again, it
    # finds the lease gone by its own reckoning and gives the execution back, not started.
    log = tmp_path / "calls.jsonl"
    env = {"HORAE_TEST_LOG": str(log), "HORAE_EXECUTION_LEASE_SECONDS": "3",
           "HORAE_CONCURRENCY": "1"}  # fmt: skip
    port = free_port()
    sleeper, row = await published_and_claimed_ahead(
        processes, stored, env | {"HORAE_METRICS_PORT": str(port)}
    )
    due = row["due_at"]
    slow = await create(stored, JobSpec(task="e2e.slow", run_at=datetime.now(UTC),
                                      payload={"seconds": 4}),
                        due_in=(due - datetime.now(UTC)).total_seconds() - 1)  # fmt: skip

    async def both_checked() -> bool:  # the slow one's claim ahead and this one's, once due
        samples = await scrape(f"http://127.0.0.1:{port}/metrics")
        name = "horae_claims_ahead_checked_total"
        return sum(value(samples, name, how=how) for how in ("promised", "waited")) >= 2

    await until(both_checked, timeout=20, what="both claims ahead checked at their due times")
    assert [(c["job_id"], c["worker"]) for c in invocations(log)] == [
        (str(slow["id"]), sleeper.identity)
    ], "the slow handler holds the only slot at the due time, and nothing else ran"
    heir, _ = await run_elsewhere_while_frozen(processes, stored, sleeper, row, env)

    async def woken() -> bool:  # its log says it gave the execution back (not started)
        return "given back" in sleeper.log() or len(echoes()) > 1

    def echoes() -> list[str]:
        return [c["worker"] for c in invocations(log) if c["job_id"] == str(row["job_id"])]

    await until(woken, timeout=15, what="the woken worker giving the execution back")
    assert echoes() == [heir.identity]


async def test_a_job_cancelled_after_its_execution_was_claimed_ahead_never_starts(
    processes: Processes, stored: StoreRows, broker_url: str, broker_prefix: str, tmp_path: Path
) -> None:
    # A cancel committed after the claim ahead reaches the worker with its next heartbeat
    # (every lease/3): before the due time, the handler never starts and the execution ends
    # cancelled.
    log = tmp_path / "calls.jsonl"
    env = {"HORAE_TEST_LOG": str(log), "HORAE_EXECUTION_LEASE_SECONDS": "3"}
    processes.start("worker", "worker", "--tasks", TASKS, env=env)
    row, msg = await echo_message(stored, due_in=8)
    await publish(broker_url, broker_prefix, msg)
    await claimed_ahead(stored, row)
    async with stored.on_job(row["job_id"]) as conn:
        await jobs.cancel_job(conn, row["job_id"], now=datetime.now(UTC))
    [done] = await terminal(stored, row["job_id"], 1, timeout=20)
    assert (done["status"], done["error_kind"]) == ("cancelled", "cancel_requested")
    assert invocations(log) == []


async def test_sigterm_hands_back_a_claim_ahead_as_it_was_due(
    processes: Processes, stored: StoreRows, broker_url: str, broker_prefix: str
) -> None:
    # A stopping worker does not wait for what it claimed ahead: past the grace period it gives
    # it back, `scheduled` and due as it was (a microsecond later, a new key for the scheduler
    # to publish again; never earlier), with no owner, and exits 0.
    env = {"HORAE_SHUTDOWN_GRACE_SECONDS": "1"}
    leaving = processes.start("worker", "worker", "--tasks", TASKS, env=env)
    row, msg = await echo_message(stored, due_in=20)
    await publish(broker_url, broker_prefix, msg)
    await claimed_ahead(stored, row)
    leaving.signal(signal.SIGTERM)
    assert await asyncio.to_thread(leaving.popen.wait, 15) == 0
    back = await stored.fetchrow("SELECT * FROM executions WHERE id = $1", row["id"])
    assert (back["status"], back["due_at"], back["lease_owner"], back["attempt"]) == (
        "scheduled", row["due_at"] + timedelta(microseconds=1), None, 1)  # fmt: skip


async def test_a_claim_ahead_handed_back_by_a_stopping_worker_runs_elsewhere_when_due(
    processes: Processes, stored: StoreRows, tmp_path: Path
) -> None:
    # Published 8 s ahead and claimed ahead, then handed back by a worker rolled before its
    # due time: the scheduler that published it publishes it again, and another worker runs
    # it on time. Handed back under its old key, the scheduler skipped it as published, and
    # it waited for the redelivery timeout (60 s).
    log = tmp_path / "calls.jsonl"
    env = {"HORAE_TEST_LOG": str(log), "HORAE_SHUTDOWN_GRACE_SECONDS": "1"}
    leaving, row = await published_and_claimed_ahead(processes, stored, env)
    leaving.signal(signal.SIGTERM)
    assert await asyncio.to_thread(leaving.popen.wait, 15) == 0
    heir = processes.start("worker", "worker", "--tasks", TASKS, env=env)
    [done] = await terminal(stored, row["job_id"], 1, timeout=40)
    assert (done["status"], done["attempt"]) == ("succeeded", 1)
    late = (done["started_at"] - row["due_at"]).total_seconds()
    assert late < 2.0, f"started {late:.2f} s after its due time"
    assert [c["worker"] for c in invocations(log)] == [heir.identity]


async def test_retryable_three_times_then_succeeds_with_one_idempotency_key(
    processes: Processes, stored: StoreRows, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    processes.start("scheduler", "scheduler")
    processes.start("worker", "worker", "--tasks", TASKS, env={"HORAE_TEST_LOG": str(log)})
    policy = RetryPolicy(max_attempts=5, initial_interval_seconds=0.5, max_interval_seconds=1)
    job = await create(stored, JobSpec(task="e2e.flaky", run_at=datetime.now(UTC), retry=policy,
                                     payload={"fail_times": 3}), due_in=3)  # fmt: skip
    rows = await terminal(stored, job["id"], 4)
    assert [(r["attempt"], r["status"]) for r in rows] == [
        (1, "failed"), (2, "failed"), (3, "failed"), (4, "succeeded")]  # fmt: skip
    assert len({r["occurrence_at"] for r in rows}) == 1
    for previous, retry in itertools.pairwise(rows):
        delay = (retry["due_at"] - previous["finished_at"]).total_seconds()
        cap = policy.backoff_cap(previous["attempt"]).total_seconds()
        assert 0 <= delay <= cap + 0.05, (previous["attempt"], delay, cap)
    calls = invocations(log)
    assert [c["attempt"] for c in calls] == [1, 2, 3, 4]
    assert len({c["idempotency_key"] for c in calls}) == 1
    assert len({c["execution_id"] for c in calls}) == 4


async def test_permanent_error_fails_at_once_and_exhausted_retries_are_dead_lettered(
    processes: Processes, stored: StoreRows, broker_url: str, broker_prefix: str
) -> None:
    processes.start("scheduler", "scheduler")
    with webhook_receiver() as (url, alerts):
        processes.start("worker", "worker", "--tasks", TASKS,
                        env={"HORAE_DEAD_WEBHOOK_URL": url})  # fmt: skip
        broken = await create(stored, JobSpec(task="e2e.broken", run_at=datetime.now(UTC)),
                              due_in=3)  # fmt: skip
        policy = RetryPolicy(max_attempts=2, initial_interval_seconds=0.2,
                             max_interval_seconds=0.5)  # fmt: skip
        doomed = await create(stored, JobSpec(task="e2e.flaky", run_at=datetime.now(UTC),
                                            retry=policy, payload={"fail_times": 99}),
                              due_in=3)  # fmt: skip
        [failed] = await terminal(stored, broken["id"], 1)
        assert failed["status"] == "failed" and failed["error_kind"] == "PermanentError"
        rows = await terminal(stored, doomed["id"], 2)
        assert [r["status"] for r in rows] == ["failed", "dead"]
        letters = await drain(broker_url, f"{broker_prefix}.dead-letter")
        assert set(letters) == {str(rows[-1]["id"])}

        async def alerted() -> bool:
            return bool(alerts)

        await until(alerted, timeout=10, what="the dead-execution webhook")
    [alert] = alerts  # the permanent failure is not dead: no alert for it
    assert alert["type"] == "horae.execution.dead"
    assert (alert["execution_id"], alert["job_id"]) == (str(rows[-1]["id"]), str(doomed["id"]))
    assert (alert["task"], alert["attempt"], alert["tenant"]) == ("e2e.flaky", 2, "t")
    assert alert["error_kind"] == rows[-1]["error_kind"]


async def test_cancelling_a_job_stops_its_running_handler(
    processes: Processes, stored: StoreRows, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    processes.start("scheduler", "scheduler")
    env = {"HORAE_TEST_LOG": str(log), "HORAE_EXECUTION_LEASE_SECONDS": "3"}
    processes.start("worker", "worker", "--tasks", TASKS, env=env)
    job = await create(stored, JobSpec(task="e2e.slow", run_at=datetime.now(UTC),
                                     payload={"seconds": 60}), due_in=2)  # fmt: skip

    async def started() -> bool:
        return bool(invocations(log))

    await until(started, timeout=20, what="the slow handler to start")
    async with stored.on_job(job["id"]) as conn:
        await jobs.cancel_job(conn, job["id"], now=datetime.now(UTC))
    [row] = await terminal(stored, job["id"], 1, timeout=10)
    assert row["status"] == "cancelled" and row["error_kind"] == "cancel_requested"
    assert invocations(log, "end") == []


async def test_sigterm_lets_running_handlers_finish_and_exits_zero(
    processes: Processes, stored: StoreRows, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    processes.start("scheduler", "scheduler")
    worker = processes.start("worker", "worker", "--tasks", TASKS, env={"HORAE_TEST_LOG": str(log)})
    job = await create(stored, JobSpec(task="e2e.slow", run_at=datetime.now(UTC),
                                     payload={"seconds": 3}), due_in=2)  # fmt: skip

    async def started() -> bool:
        return bool(invocations(log))

    await until(started, timeout=20, what="the slow handler to start")
    worker.signal(signal.SIGTERM)
    assert await asyncio.to_thread(worker.popen.wait, 30) == 0
    [row] = await terminal(stored, job["id"], 1, timeout=5)
    assert row["status"] == "succeeded"
    assert len(invocations(log, "end")) == 1


async def test_killed_worker_loses_its_executions_to_another_after_lease_expiry(
    processes: Processes, stored: StoreRows, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    env = {"HORAE_TEST_LOG": str(log), "HORAE_EXECUTION_LEASE_SECONDS": "3"}
    processes.start("scheduler", "scheduler")
    victim = processes.start("worker", "worker", "--tasks", TASKS, "--concurrency", "100", env=env)
    now = datetime.now(UTC)
    quick = RetryPolicy(max_attempts=3, initial_interval_seconds=0.2, max_interval_seconds=0.5)
    new = [jobs.NewJob(spec=JobSpec(task="e2e.slow", run_at=now + timedelta(seconds=3),
                                    payload={"seconds": 4}, retry=quick),
                       tenant="t", source=JobSource.API) for _ in range(100)]  # fmt: skip
    await stored.create(new, now=now)

    async def all_started() -> bool:
        return len(invocations(log)) >= 100

    await until(all_started, timeout=30, what="100 slow handlers running")
    victim.kill()
    heir = processes.start("worker", "worker", "--tasks", TASKS, "--concurrency", "100", env=env)

    async def all_done() -> bool:
        done = await stored.count(  # (a job's executions are all in its group)
            "SELECT count(DISTINCT job_id) FROM executions WHERE status = 'succeeded'"
        )
        return done == 100

    await until(all_done, timeout=60, interval=0.5, what="all 100 occurrences succeeded")
    lost = await stored.fetch("SELECT * FROM executions WHERE status <> 'succeeded'")
    assert len(lost) == 100 and {r["error_kind"] for r in lost} == {"lease_lost"}
    assert {r["attempt"] for r in lost} == {1}
    finishers = {c["worker"] for c in invocations(log, "end")}
    assert finishers == {heir.identity}


async def test_a_last_attempt_lost_with_its_worker_is_dead_lettered_and_sent_to_the_webhook(
    processes: Processes, stored: StoreRows, tmp_path: Path, broker_url: str, broker_prefix: str
) -> None:
    """A death the reaper finds (the last attempt's worker stopped heartbeating) reaches the
    dead-execution webhook like one a worker records; it once reached only the queue."""
    log = tmp_path / "calls.jsonl"
    with webhook_receiver() as (url, alerts):
        processes.start("scheduler", "scheduler", env={"HORAE_DEAD_WEBHOOK_URL": url})
        victim = processes.start("worker", "worker", "--tasks", TASKS, env={
            "HORAE_TEST_LOG": str(log), "HORAE_EXECUTION_LEASE_SECONDS": "3",
            "HORAE_DEAD_WEBHOOK_URL": url,
        })  # fmt: skip
        once = RetryPolicy(max_attempts=1)
        job = await create(stored, JobSpec(task="e2e.slow", run_at=datetime.now(UTC), retry=once,
                                         payload={"seconds": 60}), due_in=2)  # fmt: skip

        async def started() -> bool:
            return len(invocations(log)) == 1

        await until(started, timeout=20, what="the slow handler to start")
        victim.kill()
        [row] = await terminal(stored, job["id"], 1, timeout=30)
        assert (row["status"], row["error_kind"]) == ("dead", "lease_lost")

        async def alerted() -> bool:
            return bool(alerts)

        await until(alerted, timeout=15, what="the dead-execution webhook")
    [alert] = alerts
    assert alert["type"] == "horae.execution.dead"
    assert (alert["execution_id"], alert["job_id"]) == (str(row["id"]), str(job["id"]))
    assert (alert["task"], alert["attempt"], alert["error_kind"]) == ("e2e.slow", 1, "lease_lost")
    assert alert["error_message"] == row["error_message"]
    assert set(await drain(broker_url, f"{broker_prefix}.dead-letter")) == {str(row["id"])}


async def test_a_tenant_limit_is_never_exceeded_and_other_tenants_are_unaffected(
    processes: Processes, stored: StoreRows
) -> None:
    async with stored.main.acquire() as conn:
        await tenants.set_tenant_limit(conn, "limited", 5)
    processes.start("scheduler", "scheduler")
    processes.start("worker", "worker", "--tasks", TASKS, "--concurrency", "30")
    now = datetime.now(UTC)
    due = now + timedelta(seconds=4)
    new = [
        jobs.NewJob(
            spec=JobSpec(task="e2e.slow", run_at=due, payload={"seconds": 0.5}),
            tenant="limited",
            source=JobSource.API,
        )
        for _ in range(50)
    ]
    new += [jobs.NewJob(spec=JobSpec(task="e2e.echo", run_at=due), tenant="free",
                        source=JobSource.API) for _ in range(10)]  # fmt: skip
    await stored.create(new, now=now)

    peak = 0
    deadline = asyncio.get_running_loop().time() + 60
    while asyncio.get_running_loop().time() < deadline:
        running = await stored.count(
            "SELECT count(*) FROM executions WHERE tenant = 'limited' AND status = 'running'"
        )
        peak = max(peak, running)
        done = await stored.count("SELECT count(*) FROM executions WHERE status = 'succeeded'")
        if done == 60:
            break
        await asyncio.sleep(0.05)
    assert done == 60, "every execution of both tenants completed"
    assert 1 <= peak <= 5, f"tenant limit 5 exceeded: {peak} running at once"
    attempts = max(r["attempt"] for r in await stored.fetch("SELECT attempt FROM executions"))
    assert attempts == 1, "throttling does not use up attempts"
    free_lag = max(
        r["lag"]
        for r in await stored.fetch(
            "SELECT started_at - $1::timestamptz AS lag FROM executions WHERE tenant = 'free'", due
        )
    )
    assert free_lag < timedelta(seconds=2), f"the other tenant waited {free_lag}"


def unacked(broker_url: str, queue: str) -> int:
    vhost = urlsplit(broker_url).path.lstrip("/") or "/"
    out = subprocess.run(
        ["rabbitmqctl", "-q", "list_queues", "-p", vhost, "name", "messages_unacknowledged"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == queue:
            return int(parts[1])
    return 0


async def test_a_long_handler_is_acked_at_claim_and_a_short_one_after_its_outcome(
    processes: Processes, stored: StoreRows, broker_url: str, tmp_path: Path,
    shared_default_pool: str,
) -> None:  # fmt: skip
    log = tmp_path / "calls.jsonl"
    processes.start("scheduler", "scheduler")
    processes.start("worker", "worker", "--tasks", TASKS,
                    env={"HORAE_TEST_LOG": str(log),
                         "HORAE_BROKER_CONSUMER_TIMEOUT_SECONDS": "60"})  # fmt: skip
    queue = shared_default_pool

    async def running(count: int) -> bool:
        return len(invocations(log)) >= count

    # (RabbitMQ refreshes these queue statistics every few seconds: sample over a while)
    # no timeout: may outlive RabbitMQ's consumer timeout, so its message goes at claim
    await create(stored, JobSpec(task="e2e.slow", run_at=datetime.now(UTC),
                               payload={"seconds": 12}), due_in=2)  # fmt: skip
    await until(lambda: running(1), timeout=20, what="the long handler to start")
    samples = []
    for _ in range(6):
        samples.append(await asyncio.to_thread(unacked, broker_url, queue))
        await asyncio.sleep(1)
    assert samples == [0] * 6, samples
    # a 20 s timeout is well inside the consumer timeout: acked after its outcome
    await create(stored, JobSpec(task="e2e.slow", run_at=datetime.now(UTC), timeout_seconds=20,
                               payload={"seconds": 12}), due_in=1)  # fmt: skip
    await until(lambda: running(2), timeout=20, what="the short handler to start")

    async def one_unacked() -> bool:
        return await asyncio.to_thread(unacked, broker_url, queue) == 1

    await until(one_unacked, timeout=10, interval=0.5, what="the short handler's message unacked")

    async def both_done() -> bool:
        n = await stored.count("SELECT count(*) FROM executions WHERE status = 'succeeded'")
        return n == 2

    await until(both_done, timeout=30, what="both handlers to succeed")


async def test_published_executions_of_paused_or_edited_jobs_never_reach_the_handler(
    processes: Processes, stored: StoreRows, broker_url: str, broker_prefix: str,
    tmp_path: Path, shared_default_pool: str,
) -> None:  # fmt: skip
    log = tmp_path / "calls.jsonl"
    port = free_port()
    scheduler = processes.start("scheduler", "scheduler", env={"HORAE_METRICS_PORT": str(port)})
    paused = await create(stored, JobSpec(task="e2e.echo", run_at=datetime.now(UTC)), due_in=2)
    edited = await create(stored, JobSpec(task="e2e.echo", run_at=datetime.now(UTC)), due_in=2)

    async def both_published() -> bool:  # (the rows stay scheduled until claimed)
        samples = await scrape(f"http://127.0.0.1:{port}/metrics")
        return value(samples, "horae_dispatched_total") == 2

    await until(both_published, timeout=20, what="both executions on the queue")
    scheduler.stop()
    now = datetime.now(UTC)
    async with stored.on_job(paused["id"]) as conn:
        await jobs.pause_job(conn, paused["id"], now=now)
    async with stored.on_job(edited["id"]) as conn:
        await jobs.edit_job(conn, edited["id"], JobSpec(task="e2e.echo", cron="0 0 1 1 *"),
                            now=now)  # fmt: skip
    processes.start("worker", "worker", "--tasks", TASKS, env={"HORAE_TEST_LOG": str(log)})

    # Both published executions are still scheduled: the pause and the edit cancel them at
    # once, and their messages, delivered once a worker runs, find nothing to claim.
    found = await stored.fetch("SELECT status::text FROM executions WHERE job_version = 1"
                               " AND job_id = ANY($1)", [paused["id"], edited["id"]])  # fmt: skip
    assert [r["status"] for r in found] == ["cancelled", "cancelled"]

    async def acked() -> bool:  # taken off the queue, and let go (a claim finds them ended)
        ready = await ready_messages(broker_url, shared_default_pool)
        return ready == 0 and await asyncio.to_thread(unacked, broker_url, shared_default_pool) == 0

    await until(acked, timeout=20, what="both messages taken by the worker and acked")
    assert invocations(log) == []


async def test_sigterm_past_the_grace_period_hands_unfinished_work_to_another_worker(
    processes: Processes, stored: StoreRows, tmp_path: Path
) -> None:
    # The handler needs 1.5 s to clean up once stopped: the execution is handed back only
    # after that, so the heir (already up and idle) never runs it while it still runs here.
    log = tmp_path / "calls.jsonl"
    env = {"HORAE_TEST_LOG": str(log), "HORAE_SHUTDOWN_GRACE_SECONDS": "1"}
    processes.start("scheduler", "scheduler")
    leaving = processes.start("worker", "worker", "--tasks", TASKS, env=env)
    job = await create(stored, JobSpec(task="e2e.slow", run_at=datetime.now(UTC),
                                     payload={"seconds": 6, "cleanup": 1.5}), due_in=2)  # fmt: skip

    async def started(count: int) -> bool:
        return len(invocations(log)) >= count

    await until(lambda: started(1), timeout=20, what="the handler to start")
    port = free_port()
    heir = processes.start("worker", "worker", "--tasks", TASKS,
                           env={**env, "HORAE_METRICS_PORT": str(port)})  # fmt: skip
    assert (await until_ready(port)).startswith("consuming"), "the heir consuming"
    leaving.signal(signal.SIGTERM)
    assert await asyncio.to_thread(leaving.popen.wait, 15) == 0
    [row] = await terminal(stored, job["id"], 1, timeout=30)
    assert row["status"] == "succeeded" and row["attempt"] == 1, "handing back is not an attempt"
    assert [c["worker"] for c in invocations(log)] == [leaving.identity, heir.identity]
    assert [c["worker"] for c in invocations(log, "end")] == [heir.identity]
    [cleaned] = invocations(log, "cleaned")
    assert cleaned["worker"] == leaving.identity
    assert cleaned["at"] < invocations(log)[1]["at"], "handed back before its handler stopped"


def rabbit_env(key: str, value: int | None = None) -> int:
    """Read (and with `value`, set) one of the broker's `rabbit` application settings.
    Channels read these when they open, so a change applies to workers started after it."""
    expr = f"application:get_env(rabbit, {key})."
    if value is not None:
        expr = f"application:set_env(rabbit, {key}, {value}), {expr}"
    out = subprocess.run(["rabbitmqctl", "-q", "eval", expr], capture_output=True, text=True,
                         check=True, timeout=60).stdout  # fmt: skip
    return int(out.strip().removeprefix("{ok,").removesuffix("}"))


async def test_a_handler_outliving_the_brokers_consumer_timeout_is_not_redelivered(
    processes: Processes, stored: StoreRows, tmp_path: Path
) -> None:
    """RabbitMQ lowered to a 3 s consumer timeout (checked every 0.5 s). A worker that knows
    it acks a 60 s-bounded handler at claim; one that believes the 30 min default holds the
    message until the outcome, and the broker takes it back mid-run."""
    saved = {key: rabbit_env(key) for key in ("consumer_timeout", "channel_tick_interval")}
    try:
        rabbit_env("consumer_timeout", 3000)
        rabbit_env("channel_tick_interval", 500)
        processes.start("scheduler", "scheduler")
        runs = {}
        for name, believed in (("aware", "3"), ("unaware", "1800")):
            log = tmp_path / f"{name}.jsonl"
            worker = processes.start(f"worker-{name}", "worker", "--tasks", TASKS, env={
                "HORAE_TEST_LOG": str(log), "HORAE_BROKER_CONSUMER_TIMEOUT_SECONDS": believed,
            })  # fmt: skip
            job = await create(stored, JobSpec(task="e2e.slow", run_at=datetime.now(UTC),
                               timeout_seconds=60, payload={"seconds": 8}), due_in=0)  # fmt: skip
            [done] = await terminal(stored, job["id"], 1, timeout=30)
            await asyncio.sleep(1)  # let any redelivery arrive
            worker.stop()
            runs[name] = (done["status"], len(invocations(log)), worker.log())
    finally:
        for key, value in saved.items():
            rabbit_env(key, value)
    status, started, log_text = runs["aware"]
    assert (status, started) == ("succeeded", 1)
    assert "duplicate or stale, dropped" not in log_text, "the broker redelivered the message"
    status, started, log_text = runs["unaware"]
    assert status == "succeeded" and started == 1, "the claim still keeps a redelivery harmless"
    assert "duplicate or stale, dropped" in log_text, "the broker's timeout did not take effect"


@pytest.mark.skipif(not HAS_FAKETIME, reason="no libfaketime (apt-get install faketime)")
async def test_a_worker_whose_clock_runs_behind_keeps_its_leases(
    processes: Processes, stored: StoreRows, tmp_path: Path
) -> None:
    # Its clock 10 s behind, with 3 s leases: were the leases' ends read from its own clock,
    # every lease would have ended before it was granted, and the reaper would take each
    # execution away from the handler still running it.
    log = tmp_path / "calls.jsonl"
    processes.start("scheduler", "scheduler")
    processes.start("worker", "worker", "--tasks", TASKS, "--concurrency", "20", env={
        "HORAE_TEST_LOG": str(log), "HORAE_EXECUTION_LEASE_SECONDS": "3",
        **clock_offset_env("-10"),
    })  # fmt: skip
    now = datetime.now(UTC)
    new = [jobs.NewJob(spec=JobSpec(task="e2e.slow", run_at=now + timedelta(seconds=2),
                                    payload={"seconds": 5}),
                       tenant="t", source=JobSource.API) for _ in range(20)]  # fmt: skip
    await stored.create(new, now=now)

    async def all_running() -> list | None:
        rows = await stored.fetch(
            "SELECT lease_until - clock_timestamp() AS left FROM executions"
            " WHERE status = 'running'"
        )
        return rows if len(rows) == 20 else None

    running = await until(all_running, timeout=30, interval=0.2, what="20 handlers running")
    assert all(timedelta(0) < r["left"] <= timedelta(seconds=3.5) for r in running), running

    async def all_finished() -> list | None:
        rows = await stored.fetch("SELECT * FROM executions")
        return rows if all(r["finished_at"] is not None for r in rows) else None

    rows = await until(all_finished, timeout=40, interval=0.5, what="20 executions finished")
    assert (
        sorted((r["status"], r["attempt"], r["error_kind"]) for r in rows)
        == [("succeeded", 1, None)] * 20
    )
    assert len(invocations(log)) == 20, "no execution was run twice"

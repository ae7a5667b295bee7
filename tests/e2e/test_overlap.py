"""Overlap policies with a real scheduler and real workers: what an occurrence due while the
previous one of its job still runs does under Allow, Forbid, Replace and BufferOne, and
what happens when the worker running the previous one is killed.

Occurrences are run by hand (a trigger: a first attempt due now, judged like any other) on
jobs whose schedule fires once a year, so each test decides when one is due; the BufferOne
test runs a per-second schedule, as a user would."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from horae.models import ConcurrencyPolicy, JobSource, JobSpec, RetryPolicy
from horae.scheduler.rounds import BUFFER_ONE, FORBID
from horae.store import jobs
from tests.support.invocations import invocations
from tests.support.kube import free_port
from tests.support.processes import Processes
from tests.support.store_rows import StoreRows
from tests.support.wait import until, until_ready

TASKS = "tests/e2e/tasks.py"
YEARLY = "0 0 1 1 *"
"""The schedule of the jobs whose occurrences the tests trigger: none falls due meanwhile."""
SHORT_GRACE = {"HORAE_SHUTDOWN_GRACE_SECONDS": "1"}
"""Workers stopped at teardown give running handlers 1 s (not 25)."""
pytestmark = pytest.mark.usefixtures("shared_default_pool")


async def slow_job(
    stored: StoreRows,
    policy: ConcurrencyPolicy,
    seconds: float,
    *,
    cron: str = YEARLY,
    retry: RetryPolicy | None = None,
) -> uuid.UUID:
    """A job of tenant `t` whose handler (`e2e.slow`) runs `seconds`."""
    spec = JobSpec(
        task="e2e.slow",
        cron=cron,
        payload={"seconds": seconds},
        concurrency_policy=policy,
        retry=retry or RetryPolicy(),
    )
    return await stored.create_job(spec, tenant="t", source=JobSource.API, now=datetime.now(UTC))


async def trigger(stored: StoreRows, job_id: uuid.UUID) -> uuid.UUID:
    """An occurrence of the job due now; its execution id."""
    async with stored.on_job(job_id) as conn:
        return await jobs.trigger_job(conn, job_id, now=datetime.now(UTC))


async def row(stored: StoreRows, execution_id: uuid.UUID) -> asyncpg.Record:
    found = await stored.fetchrow("SELECT * FROM executions WHERE id = $1", execution_id)
    assert found is not None
    return found


async def ended(stored: StoreRows, *ids: uuid.UUID, timeout: float = 20) -> list[asyncpg.Record]:
    """The rows of these executions once every one has ended, in the order given."""

    async def done() -> list[asyncpg.Record] | None:
        rows = [await row(stored, i) for i in ids]
        return rows if all(r["finished_at"] is not None for r in rows) else None

    return await until(done, timeout=timeout, interval=0.1, what=f"{len(ids)} executions to end")


def calls(log: Path, event: str) -> dict[str, dict[str, Any]]:
    """The handler's `event` records by execution id."""
    return {c["execution_id"]: c for c in invocations(log, event)}


async def started(log: Path, *ids: uuid.UUID, timeout: float = 20) -> dict[str, dict[str, Any]]:
    """Once the handlers of all these executions have started: their start records."""

    async def all_started() -> dict[str, dict[str, Any]] | None:
        found = calls(log, "start")
        return found if all(str(i) in found for i in ids) else None

    return await until(all_started, timeout=timeout, what=f"{len(ids)} handlers to start")


async def test_allow_runs_overlapping_occurrences_side_by_side_and_forbid_skips_the_second(
    processes: Processes, stored: StoreRows, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    processes.start("scheduler", "scheduler")
    processes.start("worker", "worker", "--tasks", TASKS,
                    env={"HORAE_TEST_LOG": str(log), **SHORT_GRACE})  # fmt: skip
    allow = await slow_job(stored, ConcurrencyPolicy.ALLOW, 3)
    forbid = await slow_job(stored, ConcurrencyPolicy.FORBID, 3)
    a1, f1 = await trigger(stored, allow), await trigger(stored, forbid)
    await started(log, a1, f1)
    a2, f2 = await trigger(stored, allow), await trigger(stored, forbid)

    # Forbid: the second is skipped at once, with why, while the first runs on.
    [skipped] = await ended(stored, f2, timeout=10)
    assert (skipped["status"], skipped["error_kind"], skipped["error_message"]) == (
        "skipped",
        "forbid",
        FORBID,
    )
    assert (await row(stored, f1))["status"] == "running"
    # Allow: both run, the second starting while the first still runs.
    rows = await ended(stored, a1, a2, f1)
    assert [r["status"] for r in rows] == ["succeeded"] * 3
    first, second = rows[0], rows[1]
    assert second["started_at"] < first["finished_at"], "the two Allow runs did not overlap"
    assert str(f2) not in calls(log, "start")
    # Once the first has ended, the next occurrence runs.
    f3 = await trigger(stored, forbid)
    [ran] = await ended(stored, f3)
    assert ran["status"] == "succeeded"


async def test_replace_cancels_the_running_handler_within_a_second_of_the_new_dispatch(
    processes: Processes, stored: StoreRows, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    processes.start("scheduler", "scheduler")
    # Leases of 2 min: the worker's first heartbeat after a claim comes 40 s later, so
    # only the scheduler's message can stop the handler within this test.
    env = {"HORAE_TEST_LOG": str(log), "HORAE_EXECUTION_LEASE_SECONDS": "120", **SHORT_GRACE}
    processes.start("worker", "worker", "--tasks", TASKS, env=env)
    job = await slow_job(stored, ConcurrencyPolicy.REPLACE, 3)
    old = await trigger(stored, job)
    await started(log, old)
    new = await trigger(stored, job)

    [replaced] = await ended(stored, old, timeout=10)
    assert (replaced["status"], replaced["error_kind"]) == ("cancelled", "cancel_requested")
    cleaned = calls(log, "cleaned")[str(old)]  # the handler saw its CancelledError then
    # Measured from the new occurrence's creation, which its dispatch follows (its row may
    # never show the dispatch: a worker's claim can win the race with the round's record).
    created = (await row(stored, new))["created_at"]
    took = cleaned["at"] - created.timestamp()
    assert 0 <= took < 1.0, f"the replaced handler was cancelled {took:.3f} s after the dispatch"
    assert str(old) not in calls(log, "end")
    await started(log, new)


async def test_buffer_one_runs_one_occurrence_right_after_the_running_one_and_skips_the_next(
    processes: Processes, stored: StoreRows, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    port = free_port()
    processes.start("scheduler", "scheduler", env={"HORAE_METRICS_PORT": str(port)})
    processes.start("worker", "worker", "--tasks", TASKS,
                    env={"HORAE_TEST_LOG": str(log), **SHORT_GRACE})  # fmt: skip
    await until_ready(port)
    # Due every second, each run taking 2.2 s: the occurrence due 1 s after a run started
    # waits for it, and the one due while that one waits is skipped.
    job = await slow_job(stored, ConcurrencyPolicy.BUFFER_ONE, 2.2, cron="* * * * * *")

    async def resolved() -> list[asyncpg.Record] | None:
        rows = await stored.fetch(
            "SELECT * FROM executions WHERE job_id = $1 ORDER BY occurrence_at", job
        )
        return rows[:5] if len(rows) >= 5 and all(r["finished_at"] for r in rows[:5]) else None

    rows = await until(resolved, timeout=25, interval=0.2, what="5 occurrences resolved")
    async with stored.on_job(job) as conn:
        await jobs.pause_job(conn, job, now=datetime.now(UTC))
    # One run, the next one due while it ran waits and runs right after it, the one due
    # while that one waited is skipped, with why.
    assert [(r["status"], r["error_kind"]) for r in rows[:3]] == [
        ("succeeded", None),
        ("succeeded", None),
        ("skipped", "buffer_one"),
    ]
    first, buffered, skipped = rows[:3]
    assert buffered["occurrence_at"] < first["finished_at"] <= buffered["started_at"]
    assert skipped["error_message"] == BUFFER_ONE
    assert first["started_at"] <= skipped["occurrence_at"] < buffered["started_at"]
    # And so on: runs never overlap, one due while another ran starts at most 1.5 s after
    # that one ended, and every skipped one was due while one ran and an earlier one waited.
    # Their next occurrences were scheduled as they waited: the schedule went on each second.
    assert [(r["occurrence_at"] - first["occurrence_at"]).total_seconds() for r in rows] == [
        0, 1, 2, 3, 4
    ]  # fmt: skip
    runs = [r for r in rows if r["status"] == "succeeded"]
    for before, after in itertools.pairwise(runs):
        assert before["finished_at"] <= after["started_at"], "two runs overlapped"
        if after["occurrence_at"] < before["finished_at"]:
            waited = (after["started_at"] - before["finished_at"]).total_seconds()
            assert waited < 1.5, f"a buffered run started {waited:.2f} s after the last ended"
    for s in rows:
        if s["status"] == "skipped":
            assert (s["error_kind"], s["error_message"]) == ("buffer_one", BUFFER_ONE)
            due = s["occurrence_at"]
            assert any(r["started_at"] <= due < r["finished_at"] for r in runs)
            assert any(r["occurrence_at"] < due < r["started_at"] for r in runs)
        else:
            assert s["status"] == "succeeded", dict(s)


async def test_a_killed_workers_runs_forbid_skips_buffer_one_waits_and_replace_cancels_them(
    processes: Processes, stored: StoreRows, tmp_path: Path
) -> None:
    """The worker running an execution of a Forbid, a BufferOne and a Replace job is killed.
    Its rows stay `running` until their leases run out and the reaper ends them: meanwhile a
    Forbid occurrence is skipped, a BufferOne one waits (and the next is skipped), and a
    Replace one runs at once. The reaper ends the Forbid and BufferOne runs dead (one
    attempt each), and the replaced one `cancelled`, not retried; then the BufferOne
    occurrence that waited runs, and so does the next Forbid one."""
    log = tmp_path / "calls.jsonl"
    env = {"HORAE_TEST_LOG": str(log), "HORAE_EXECUTION_LEASE_SECONDS": "2", **SHORT_GRACE}
    processes.start("scheduler", "scheduler")
    victim = processes.start("worker", "worker", "--tasks", TASKS, env=env)
    once = RetryPolicy(max_attempts=1)
    forbid = await slow_job(stored, ConcurrencyPolicy.FORBID, 2, retry=once)
    buffer_one = await slow_job(stored, ConcurrencyPolicy.BUFFER_ONE, 2, retry=once)
    replace = await slow_job(stored, ConcurrencyPolicy.REPLACE, 2, retry=once)
    f1, b1, r1 = [await trigger(stored, j) for j in (forbid, buffer_one, replace)]
    await started(log, f1, b1, r1)
    victim.kill()
    heir = processes.start("worker", "worker", "--tasks", TASKS, env=env)

    f2, b2, b3, r2 = [await trigger(stored, j) for j in (forbid, buffer_one, buffer_one, replace)]
    [f2_row, b3_row] = await ended(stored, f2, b3, timeout=10)
    assert (f2_row["status"], f2_row["error_kind"]) == ("skipped", "forbid")
    assert (b3_row["status"], b3_row["error_kind"]) == ("skipped", "buffer_one")

    f1_row, b1_row, r1_row = await ended(stored, f1, b1, r1, timeout=20)
    assert (f1_row["status"], f1_row["error_kind"]) == ("dead", "lease_lost")
    assert (b1_row["status"], b1_row["error_kind"]) == ("dead", "lease_lost")
    assert (r1_row["status"], r1_row["error_kind"]) == ("cancelled", "cancel_requested")
    assert victim.identity in r1_row["error_message"]
    f3 = await trigger(stored, forbid)
    runs = await started(log, r2, b2, f3)
    assert {runs[str(i)]["worker"] for i in (r2, b2, f3)} == {heir.identity}
    b2_row = await row(stored, b2)
    waited = (b2_row["started_at"] - b1_row["finished_at"]).total_seconds()
    assert 0 <= waited < 1.5, f"the waiting BufferOne run started {waited:.2f} s after"
    # The replaced run was not retried: one attempt of its occurrence; and the new one was
    # dispatched at once, not held up by a run whose worker was gone.
    attempts = await stored.count(
        "SELECT count(*) FROM executions WHERE job_id = $1 AND occurrence_at = $2",
        replace,
        r1_row["occurrence_at"],
    )
    assert attempts == 1
    r2_row = await row(stored, r2)
    dispatched = r2_row["enqueued_at"] or r2_row["started_at"]  # (a claim may beat the record)
    assert dispatched < r1_row["finished_at"]

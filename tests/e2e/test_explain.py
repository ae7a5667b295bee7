"""`horae explain` on what real scheduler and worker processes left in the store: a run on
time, an occurrence Forbid skipped, a paused interval, occurrences that never existed, and a
run late because the replica owning its shard froze and another took the shard."""

from __future__ import annotations

import asyncio
import re
import signal
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from horae.api.schemas import ExplanationOut
from horae.cli.explain import lines
from horae.errors import TransactionAborted
from horae.models import ConcurrencyPolicy, JobSource, JobSpec
from horae.store import jobs
from horae.store.explain import explain_occurrence
from horae.store.groups import Store
from tests.e2e.test_scheduler import all_held_by, balanced
from tests.integration.test_cli import horae
from tests.support.kube import ControlPlane, free_port
from tests.support.processes import Processes
from tests.support.scheduling import holders
from tests.support.store_rows import StoreRows
from tests.support.wait import until, until_ready

TASKS = "tests/e2e/tasks.py"
pytestmark = pytest.mark.usefixtures("shared_default_pool")
S = timedelta(seconds=1)
Operation = Callable[..., Awaitable[Any]]


def explain_cli(db_url: str, job_id: uuid.UUID, at: datetime) -> list[str]:
    """`horae explain JOB --at AT`'s table, line by line (printed: `pytest -s` shows it)."""
    r = horae("explain", str(job_id), "--at", at.isoformat(), db_url=db_url)
    assert r.returncode == 0, r.stderr
    print(f"$ horae explain {job_id} --at {at.isoformat()}\n{r.stdout}")
    return r.stdout.splitlines()


async def change(stored: StoreRows, job_id: uuid.UUID, operation: Operation) -> None:
    """Pause, resume or cancel the job now; again if Postgres picked it as a deadlock's
    victim (its job lock taken before the executions', where a worker recording an
    outcome takes the executions' first): safe to run again, as `TransactionAborted` says."""
    for attempt in range(3):
        try:
            async with stored.on_job(job_id) as conn:
                await operation(conn, job_id, now=datetime.now(UTC))
            return
        except TransactionAborted:
            if attempt == 2:
                raise


async def taken(stored: StoreRows, owners: list[str]) -> None:
    """Until the store shows all 64 shards taken by `owners` (takes land just after the
    Leases): an occurrence due before would wait for its shard's first take."""

    async def all_taken() -> bool:
        sql = "SELECT count(*) FROM shard_epochs WHERE owner = ANY($1::text[]) AND NOT moved_out"
        return await stored.count(sql, owners) == 64

    await until(all_taken, timeout=10, what=f"64 shards taken by {owners} in shard_epochs")


async def start_worker(processes: Processes) -> None:
    port = free_port()
    processes.start("worker", "worker", "--tasks", TASKS, env={"HORAE_METRICS_PORT": str(port)})
    assert (await until_ready(port)).startswith("consuming")


async def test_explain_tells_a_run_on_time_a_forbid_skip_a_pause_and_what_never_was(
    control_plane: ControlPlane, namespace: str, processes: Processes, stored: StoreRows,
    db_url: str,
) -> None:  # fmt: skip
    scheduler = processes.start("scheduler", "scheduler")
    await start_worker(processes)
    await balanced(control_plane, namespace, ["scheduler-0"])
    await taken(stored, ["scheduler-0"])
    spec = JobSpec(task="e2e.slow", cron="* * * * * *", payload={"seconds": 1.5},
                   concurrency_policy=ConcurrencyPolicy.FORBID)  # fmt: skip
    created = datetime.now(UTC)
    job_id = await stored.create_job(spec, tenant="t", source=JobSource.API, now=created)

    async def ran_and_skipped() -> tuple[datetime, datetime] | None:
        rows = await stored.fetch(
            "SELECT occurrence_at, status, error_kind FROM executions WHERE job_id = $1"
            " ORDER BY occurrence_at",
            job_id,
        )
        done = [r["occurrence_at"] for r in rows if r["status"] == "succeeded"]
        forbid = [r["occurrence_at"] for r in rows if r["error_kind"] == "forbid"]
        return (done[0], forbid[0]) if done and forbid else None

    ran, skipped = await until(ran_and_skipped, timeout=20, what="a run and a Forbid skip")
    forbid = explain_cli(db_url, job_id, skipped)
    assert forbid[0] == (
        "skipped: concurrencyPolicy=Forbid: the previous occurrence is still running"
    )
    assert "by scheduler-0 (epoch" in forbid[-1]

    store = await Store.open(db_url, size=2)
    try:

        async def explained(at: datetime, now: datetime | None = None) -> list[str]:
            """As `horae explain` prints it, read in this process (one CLI run is enough)."""
            found = await explain_occurrence(
                store, job_id, tenant="t", at=at, now=now or datetime.now(UTC)
            )
            return lines(ExplanationOut.from_explanation(found))

        on_time = await explained(ran)
        assert on_time[0] == "ran on time"
        steps = {line.split()[2]: line for line in on_time[2:]}
        assert {"due", "claimed", "succeeded"} <= set(steps)
        assert "scheduler-0 (epoch" in steps["claimed"] + steps.get("dispatched", "")
        before = await explained(created.replace(microsecond=0) - 10 * S)
        assert before[0].startswith("no row: the job did not exist yet at")
        off = await explained(ran + 0.5 * S)
        assert off[0].startswith("no occurrence at ")
        assert "not a fire time of * * * * * * (UTC); the nearest are" in off[0]

        await change(stored, job_id, jobs.pause_job)
        last = await stored.fetchval(
            "SELECT max(occurrence_at) FROM executions WHERE job_id = $1", job_id
        )
        missed = last + S  # the first occurrence after the pause's cancelled one: no row
        await asyncio.sleep((missed - datetime.now(UTC)).total_seconds() + 0.5)
        paused = await explained(missed, missed + S)
        assert paused[0].startswith("no row: the job was paused at this time (paused at")
        assert paused[0].endswith("not resumed since)")
        # A pause shorter than catch-up's 5 s grace leaves no skipped rows: a resume runs its
        # occurrences late instead, from the cancelled one on. With no scheduler left to do
        # that, the job resumed then cancelled never gets to this one (with one, it may have
        # and it was cancelled: a race, not the case here). (Recorded skips:
        # tests/integration/test_explain.py.)
        scheduler.kill()
        await change(stored, job_id, jobs.resume_job)
        await change(stored, job_id, jobs.cancel_job)
        resumed = await explained(missed, missed + S)
        assert resumed[0].startswith("no row: the job was paused at this time (paused at")
        assert ", resumed at " in resumed[0] and resumed[0].endswith(")"), resumed[0]
    finally:
        await store.close()


async def test_explain_names_both_replicas_when_a_run_was_late_for_a_takeover(
    control_plane: ControlPlane, namespace: str, processes: Processes, stored: StoreRows,
    db_url: str,
) -> None:  # fmt: skip
    replicas = [processes.start("scheduler", "scheduler") for _ in range(2)]
    names = ["scheduler-0", "scheduler-1"]
    await start_worker(processes)
    await balanced(control_plane, namespace, names)
    await taken(stored, names)
    spec = JobSpec(task="e2e.echo", cron="* * * * * *")
    job_id = await stored.create_job(spec, tenant="t", source=JobSource.API, now=datetime.now(UTC))
    shard = job_id.int % 64
    owner = next(n for n, shards in holders(control_plane, namespace).items() if shard in shards)
    [heir] = set(names) - {owner}
    # Fault schedule: a few occurrences on time, then the owner freezes (SIGSTOP, a stalled
    # VM). Its Postgres session lives on, so the heir waits the lease duration (3 s) before
    # taking its shards; a process killed outright is seen gone by its session in about 1 s,
    # too soon for a run to be late (tests/integration/test_shard_leases.py).
    await asyncio.sleep(2)
    frozen = replicas[names.index(owner)]
    frozen.signal(signal.SIGSTOP)
    await all_held_by(control_plane, namespace, {heir})

    async def latest_late() -> datetime | None:
        return await stored.fetchval(
            "SELECT occurrence_at FROM executions WHERE job_id = $1 AND status = 'succeeded'"
            " AND started_at - due_at > interval '1.5 seconds'"
            " ORDER BY started_at - due_at DESC LIMIT 1",
            job_id,
        )

    late = await until(latest_late, timeout=15, what="an occurrence run late after the freeze")
    frozen.kill()  # the late run is recorded: the frozen replica has done its part
    await change(stored, job_id, jobs.cancel_job)
    shown = explain_cli(db_url, job_id, late)
    verdict = shown[0]
    # The latest run: late for the takeover alone, or (the takeover over 5 s, the grace) the
    # occurrence catch-up Latest replayed after the gap it left, the takeover named last.
    assert verdict.startswith("started ") and (
        " s late: shard " in verdict or " s late, replayed by catch-up after a gap: " in verdict
    ), verdict
    assert re.search(
        rf"shard {shard} changed owner at \S+ \S+Z \(replica {owner} → {heir}\)$", verdict
    ), verdict
    assert float(verdict.split()[1]) > 1.5  # the takeover: 2-3 s after the freeze
    assert [line.split()[2] for line in shown[2:]][:2] == ["due", "shard"]

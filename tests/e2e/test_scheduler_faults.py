"""The scheduler rides out broker and database restarts and replica crashes without
losing an occurrence."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

from horae.models import JobSource, JobSpec
from horae.store import jobs
from tests.e2e.test_scheduler import all_held_by, balanced
from tests.support.kube import ControlPlane
from tests.support.processes import Processes
from tests.support.scheduling import Published, drain, falling_due, holders
from tests.support.store_rows import StoreRows
from tests.support.wait import until


def restart_rabbitmq() -> None:
    for action in ("stop_app", "start_app"):
        subprocess.run(["rabbitmqctl", "-q", action], check=True, timeout=120)


def restart_postgres(db_url: str) -> None:
    """Restart the cluster serving `db_url` (the machine may run others beside it)."""
    port = str(urlsplit(db_url).port or 5432)
    listed = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True,
                            check=True).stdout.splitlines()  # fmt: skip
    [(version, cluster)] = [(c[0], c[1]) for c in map(str.split, listed) if c[2] == port]
    subprocess.run(["pg_ctlcluster", version, cluster, "restart"], check=True, timeout=120)


async def test_broker_then_database_restart_loses_nothing(
    control_plane: ControlPlane, namespace: str, processes: Processes, db_url: str,
    stored: StoreRows, broker_url: str, broker_prefix: str,
) -> None:  # fmt: skip
    scheduler = processes.start("scheduler", "scheduler")
    await balanced(control_plane, namespace, ["scheduler-0"])
    job_ids = await falling_due(stored, 300, start=timedelta(seconds=1),
                                spread=timedelta(seconds=20))  # fmt: skip
    # The fault schedule (not a wait for a reaction): restart the broker 3 s into the
    # 20 s of executions falling due, then the database 3 s later.
    await asyncio.sleep(3)
    await asyncio.to_thread(restart_rabbitmq)
    await asyncio.sleep(3)
    await asyncio.to_thread(restart_postgres, db_url)

    # No pool serves tenant t: the messages wait in <prefix>.held. (The pools' connections
    # from before the restart fail: not yet, then.)
    published = Published(broker_url, broker_prefix)
    await until(lambda: published.every_execution(stored), timeout=90, interval=0.5,
                what="every execution dispatched")  # fmt: skip
    ids = {str(r["id"]) for r in await stored.fetch("SELECT id FROM executions")}
    assert len(ids) == len(job_ids) and ids <= set(published.seen)
    assert scheduler.alive(), "the scheduler reconnected by itself"


async def test_cron_fires_every_second_once_across_a_replica_kill(
    control_plane: ControlPlane,
    namespace: str,
    processes: Processes,
    stored: StoreRows,
    broker_url: str,
    broker_prefix: str,
) -> None:
    replicas = [processes.start("scheduler", "scheduler") for _ in range(3)]
    names = [f"scheduler-{i}" for i in range(3)]
    await balanced(control_plane, namespace, names)
    now = datetime.now(UTC)
    # Every occurrence runs however long the handover takes: catch-up All, within an hour.
    every_second = JobSpec(
        task="e2e.echo", cron="* * * * * *", catch_up="All", catch_up_window_seconds=3600
    )
    job_id = await stored.create_job(every_second, tenant="t", source=JobSource.API, now=now)
    owner = next(n for n, shards in holders(control_plane, namespace).items()
                 if job_id.int % 64 in shards)  # fmt: skip
    await asyncio.sleep(4)  # fault schedule: ~4 occurrences on the owner, then kill it
    killed_at = datetime.now(UTC)
    replicas[names.index(owner)].kill()
    await all_held_by(control_plane, namespace, set(names) - {owner})
    held_at = datetime.now(UTC)
    await asyncio.sleep(4)  # ~4 more occurrences under the new owner
    async with stored.on_job(job_id) as conn:
        await jobs.cancel_job(conn, job_id, now=datetime.now(UTC))
    # The cancel ends what no worker claimed (every row here: none runs); the rows due more
    # than a second before it went out first.
    rows = await stored.fetch(
        "SELECT id, occurrence_at, status, finished_at FROM executions WHERE job_id = $1"
        " AND attempt = 1 AND (status <> 'cancelled' OR finished_at > due_at + interval '1 s')"
        " ORDER BY occurrence_at", job_id)  # fmt: skip
    times = [r["occurrence_at"] for r in rows]
    assert len(times) == len(set(times)), "an occurrence was scheduled twice"
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    assert gaps and set(gaps) == {1.0}, f"gap in occurrences: {gaps}"
    # Unbroken from before the kill to well after the handover (how many depends on how long
    # the handover took: 7 or 8 here).
    assert times[0] < killed_at - timedelta(seconds=2), (times[0], killed_at)
    assert times[-1] > held_at + timedelta(seconds=2), (times[-1], held_at)
    sent = await drain(broker_url, f"{broker_prefix}.held")  # no pool serves tenant t
    assert {str(r["id"]) for r in rows} <= set(sent), "every occurrence was dispatched"

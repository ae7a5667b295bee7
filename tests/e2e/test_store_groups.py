"""The whole system on a store split over two PostgreSQL clusters: ScheduledJobs whose
shards live in either group run every second on time, and moving a quarter of the shards
while they run loses no occurrence and runs none twice."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest

from horae.models import shard_of
from tests.e2e.test_first_job import scrape
from tests.support.kube import ControlPlane, free_port
from tests.support.processes import HORAE, REPO, Processes
from tests.support.wait import until

JOBS = 16


def manifests(namespace: str) -> str:
    return "".join(
        f"""---
apiVersion: horae.dev/v1alpha1
kind: ScheduledJob
metadata: {{name: every-second-{i}, namespace: {namespace}}}
spec: {{task: e2e.echo, schedule: "* * * * * *"}}
"""
        for i in range(JOBS)
    )


async def rows(urls: list[str], sql: str, *args: object) -> list[asyncpg.Record]:
    out: list[asyncpg.Record] = []
    for url in urls:
        conn = await asyncpg.connect(url)
        try:
            out += await conn.fetch(sql, *args)
        finally:
            await conn.close()
    return out


@pytest.mark.usefixtures("second_cluster_roles")  # the components' login roles there too
async def test_jobs_of_both_groups_run_and_a_move_under_load_loses_and_repeats_nothing(
    control_plane: ControlPlane, namespace: str, processes: Processes, db_url: str,
    second_url: str, tmp_path: Path,
) -> None:  # fmt: skip
    urls = [db_url, second_url]
    runs = tmp_path / "runs.jsonl"
    metrics_ports = [free_port(), free_port()]
    for port in metrics_ports:
        processes.start("scheduler", "scheduler", env={"HORAE_METRICS_PORT": str(port)})
    processes.start("worker", "worker", "--tasks", "tests/e2e/tasks.py",
                    env={"HORAE_TEST_LOG": str(runs)})  # fmt: skip
    processes.start("operator", "operator")

    async def all_shards_held() -> bool:
        leases = control_plane.get_json("leases", "-n", namespace)["items"]
        return sum(
            1 for x in leases
            if x["metadata"]["name"].startswith("horae-shard-") and x["spec"].get("holderIdentity")
        ) == 64  # fmt: skip

    await until(all_shards_held, timeout=60, what="64 shard Leases held")
    control_plane.kubectl("apply", "-f", "-", input=manifests(namespace))

    async def stored() -> list[asyncpg.Record] | None:
        found = await rows(urls, "SELECT id, shard FROM jobs WHERE tenant = $1", namespace)
        return found if len(found) == JOBS else None

    jobs = await until(stored, timeout=30, what="every ScheduledJob in the store")
    shards = {r["id"]: r["shard"] for r in jobs}
    assert {s % 2 for s in shards.values()} == {0, 1}, "all the jobs landed in one group"

    async def ran_for(seconds: int) -> bool:
        done = await rows(urls, "SELECT count(*) FROM executions WHERE status = 'succeeded'"
                          " AND tenant = $1", namespace)  # fmt: skip
        return sum(r[0] for r in done) >= JOBS * seconds

    await until(lambda: ran_for(4), timeout=30, what="four seconds of runs")

    # A quarter of the shards, half of them from each group, moved while the jobs run.
    moving = [s for s in range(0, 32, 2)][:8] + [s for s in range(33, 64, 2)][:8]
    to_second = [str(s) for s in moving if s % 2 == 0]
    to_main = [str(s) for s in moving if s % 2 == 1]
    for target, group_shards in (("second", to_second), ("main", to_main)):
        moved = await asyncio.to_thread(
            subprocess.run,
            [HORAE, "store", "move-shards", "--to", target, *group_shards],
            capture_output=True, text=True, cwd=REPO, timeout=60,
            env={**processes.env, "HORAE_DATABASE_URL": db_url},
        )  # fmt: skip
        assert moved.returncode == 0, moved.stderr
        assert moved.stdout.startswith("moved shards"), moved.stdout
    moved_jobs = {j for j, s in shards.items() if s in moving}

    await until(lambda: ran_for(12), timeout=60, what="eight more seconds of runs")
    control_plane.kubectl("delete", "scheduledjobs", "--all", "-n", namespace)

    async def quiet() -> bool:
        live = await rows(urls, "SELECT count(*) FROM executions WHERE status IN"
                          " ('queued', 'running') AND tenant = $1", namespace)  # fmt: skip
        return sum(r[0] for r in live) == 0

    await until(quiet, timeout=60, what="no execution queued or running")

    # Each job's occurrences: every second from its first to its last, each run exactly once
    # and recorded once, in one group or the other.
    done = await rows(urls, "SELECT job_id, occurrence_at, due_at, started_at FROM executions"
                      " WHERE tenant = $1 AND status = 'succeeded'", namespace)  # fmt: skip
    by_job: dict[uuid.UUID, list[asyncpg.Record]] = {}
    for r in done:
        by_job.setdefault(r["job_id"], []).append(r)
    assert set(by_job) == set(shards)
    for job_id, runs_of_job in by_job.items():
        times = sorted(r["occurrence_at"] for r in runs_of_job)
        assert len(times) == len(set(times)), f"job {job_id}: an occurrence recorded twice"
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(g == timedelta(seconds=1) for g in gaps), f"job {job_id}: missed {gaps}"
    invoked = Counter(
        (e["job_id"], e["idempotency_key"])
        for e in map(json.loads, runs.read_text().split("\n")[:-1])
    )
    assert max(invoked.values()) == 1, [k for k, n in invoked.items() if n > 1][:5]
    # On time, the moved jobs included: a move pauses their dispatch for a moment only.
    lags = sorted((r["started_at"] - r["due_at"]).total_seconds() for r in done)
    moved_lags = sorted(
        (r["started_at"] - r["due_at"]).total_seconds() for r in done if r["job_id"] in moved_jobs
    )
    # (A generous bound, as an end-to-end test's should be: p95 went over 1 s twice in
    # whole-suite runs, 1.2-1.3 s; bench/ measures the lag itself.)
    assert lags[int(len(lags) * 0.95)] < 2.0, lags[-20:]
    assert not moved_lags or moved_lags[-1] < 5.0, moved_lags[-10:]
    assert all(shard_of(j, 64) == s for j, s in shards.items())
    # The schedulers report their work and their connections by store group. Either one
    # may hold no shard with a job of one group, so their dispatches are summed.
    scraped = [scrape(port) for port in metrics_ports]
    for group in ("main", "second"):
        for samples in scraped:
            assert samples[f'horae_store_connections{{group="{group}",state="max"}}'] >= 1
        dispatched = sum(
            samples.get(f'horae_group_dispatched_total{{group="{group}"}}', 0.0)
            for samples in scraped
        )
        assert dispatched >= 1, group

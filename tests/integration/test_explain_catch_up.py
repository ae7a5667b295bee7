"""`horae explain`, through the real command, of the occurrences a real catch-up judged: a
5-minute outage of an every-10-s job with catch-up `All` and a window of 1m, as
tests/integration/test_catch_up.py simulates it (the jobs' first rows, due 5 minutes ago,
never dispatched), then a dispatcher taking the shard. The one outside the window, one the
catch-up replayed, and one Forbid skipped (a second job, Forbid: the replays are released
at once, and none is claimed here, so the first still runs when the next is due)."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from horae import broker
from horae.models import JobSource, JobSpec
from horae.store import jobs
from horae.store.executions import Claimed
from tests.integration.test_catch_up import SHARD, TEN, executions, floor10, scheduler_back
from tests.integration.test_cli import horae
from tests.support import transitions
from tests.support.groups import job_in

pytestmark = pytest.mark.one_group  # one group's dispatcher on its database


async def test_explain_names_the_catch_up_window_and_the_replay_after_an_outage(
    pool: asyncpg.Pool, publisher: broker.Publisher, db_url: str
) -> None:
    now = datetime.now(UTC)
    every = JobSpec(task="t", cron="*/10 * * * * *", catch_up="All", catch_up_window_seconds=60)
    forbid = JobSpec(task="t", cron="*/10 * * * * *", catch_up="All", catch_up_window_seconds=60,
                     concurrency_policy="Forbid")  # fmt: skip
    ids = {"All": job_in(SHARD), "Forbid": job_in(SHARD)}
    async with pool.acquire() as conn:
        for name, spec in (("All", every), ("Forbid", forbid)):
            await jobs.create_job(conn, spec, tenant="acme", source=JobSource.API, shards=64,
                                  now=now - timedelta(minutes=5), job_id=ids[name])  # fmt: skip
    first = floor10(now - timedelta(minutes=5)) + TEN  # each job's pending row, never run

    await scheduler_back(pool, publisher, db_url, list(ids.values()))

    rows = await executions(pool, ids["All"])
    outside = [r["occurrence_at"] for r in rows if r["status"] == "skipped"]
    # Published, left scheduled for a worker; the newest scheduled row is the next occurrence.
    replays = [r["occurrence_at"] for r in rows if r["status"] == "scheduled"][:-1]
    assert outside[0] == first and replays, rows
    # A worker claims the oldest replay.
    oldest = await pool.fetchrow(
        "SELECT id, due_at FROM executions WHERE job_id = $1 AND occurrence_at = $2",
        ids["All"], replays[0],
    )  # fmt: skip
    async with pool.acquire() as conn:
        claimed = await transitions.claim(conn, oldest["id"], oldest["due_at"], owner="w1",
                                          now=datetime.now(UTC), lease=timedelta(minutes=1),
                                          tenant="acme")  # fmt: skip
    assert isinstance(claimed, Claimed)
    forbidden = [
        r["occurrence_at"]
        for r in await executions(pool, ids["Forbid"])
        if r["error_kind"] == "forbid"
    ]
    assert forbidden

    def explained(job_id: uuid.UUID, at: datetime) -> list[str]:
        r = horae("explain", str(job_id), "--at", at.isoformat(), db_url=db_url)
        assert r.returncode == 0, r.stderr
        print(f"$ horae explain {job_id} --at {at.isoformat()}\n{r.stdout}")
        return r.stdout.splitlines()

    shown = explained(ids["All"], first)
    # Late by the outage (4m50s-5m) and however long the scheduler took to come back.
    late = re.match(r"skipped: outside the catch-up window of 1m \((?:(\d+)m)?(?:(\d+)s)? late\)",
                    shown[0])  # fmt: skip
    assert late and 290 <= int(late[1] or 0) * 60 + int(late[2] or 0) < 420, shown
    assert shown[1] == (
        f"job {ids['All']}, occurrence {first:%Y-%m-%d %H:%M:%S}.000Z, shard {SHARD}"
    )
    assert [line.split()[2] for line in shown[2:]] == ["due", "shard", "skipped"]

    shown = explained(ids["All"], replays[0])
    assert shown[0].startswith("started "), shown
    assert " s late, replayed by catch-up after a gap: the occurrence before, " in shown[0]
    window = "catch-up policy All runs the missed occurrences of a gap due within its window of 1m"
    assert window in shown[0], shown
    assert shown[0].endswith("; attempt 1 running on worker w1"), shown
    late = float(shown[0].split()[1])
    # The oldest within the 1m window (at most 60 s old at the judging), claimed soon after.
    assert 50 < late < 75, shown

    shown = explained(ids["Forbid"], forbidden[0])
    assert shown[0].startswith(
        "skipped: concurrencyPolicy=Forbid: the previous occurrence is still running"
    ), shown

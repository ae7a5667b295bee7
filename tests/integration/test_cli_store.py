"""`horae store` against two real PostgreSQL clusters: add a group, even the shards out,
move some back, and see each group; bad input is one line and exit code 2."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import pytest
import pytest_asyncio

from horae.models import JobSource, JobSpec
from horae.store import jobs
from tests.integration.test_cli import horae
from tests.integration.test_store_groups import job_in
from tests.support.groups import SECOND_DB, create_database, drop_database

pytestmark = pytest.mark.one_group  # splits the store itself, from one group


@pytest_asyncio.fixture
async def empty_second(db_url: str) -> AsyncIterator[str]:
    """An empty database on the second cluster, not yet a group."""
    name = f"horae_g_{uuid.uuid4().hex[:10]}"
    url = await create_database(SECOND_DB, name)
    yield url
    await drop_database(SECOND_DB, name)


def status(db_url: str) -> dict[str, dict[str, object]]:
    r = horae("store", "status", "-o", "json", db_url=db_url)
    assert r.returncode == 0, r.stderr
    return {g["name"]: g for g in json.loads(r.stdout)["groups"]}


async def test_a_group_is_added_given_half_the_shards_and_given_some_back(
    db_url: str, empty_second: str, pool: asyncpg.Pool
) -> None:
    async with pool.acquire() as conn:
        for shard in (1, 2, 63):
            await jobs.create_job(
                conn, JobSpec(task="t", cron="0 0 * * * *"), tenant="acme",
                source=JobSource.API, shards=64, now=datetime.now(UTC), job_id=job_in(shard),
            )  # fmt: skip

    r = horae("store", "add-group", "blue", empty_second, db_url=db_url)
    assert r.returncode == 0, r.stderr
    assert "store group blue added" in r.stdout and ":horae@" not in r.stdout  # no password
    groups = status(db_url)
    assert sorted(groups) == ["blue", "main"]
    assert groups["blue"]["shards"] == [] and len(groups["main"]["shards"]) == 64  # type: ignore[arg-type]

    r = horae("store", "rebalance", "--dry-run", db_url=db_url)
    assert r.returncode == 0 and r.stdout.strip() == "would move shards 32-63 to blue", r.stdout
    r = horae("store", "rebalance", db_url=db_url)
    assert r.returncode == 0, r.stderr
    assert "moved shards 32-63 from main to blue: 1 jobs, 1 live executions" in r.stdout
    groups = status(db_url)
    assert groups["blue"]["shards"] == list(range(32, 64))
    assert (groups["main"]["jobs"], groups["blue"]["jobs"]) == (2, 1)
    assert (groups["main"]["liveExecutions"], groups["blue"]["liveExecutions"]) == (2, 1)

    r = horae("store", "move-shards", "--to", "main", "62", "63", db_url=db_url)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("moved shards 62-63 from blue to main: 1 jobs")
    assert status(db_url)["main"]["jobs"] == 3
    r = horae("store", "rebalance", db_url=db_url)
    assert r.stdout.startswith("moved shards 62-63 from main to blue"), r.stdout

    # `horae migrate` migrates and reports every group.
    r = horae("migrate", db_url=db_url)
    assert r.returncode == 0, r.stderr
    assert "store group blue: applied 0 migration(s)" in r.stdout
    assert "store group main: applied 0 migration(s)" in r.stdout


def test_bad_store_input_is_one_line_and_exit_code_2(db_url: str) -> None:
    cases = [
        (["store", "add-group", "Blue", "postgresql://h/db"], "NAME 'Blue'"),
        (["store", "add-group", "blue", "mysql://h/db"], "not a postgresql:// URL"),
        (["store", "move-shards", "--to", "nowhere", "1"], "store group 'nowhere' does not exist"),
        (["store", "move-shards", "--to", "main", "64"], "shards [64]: this installation has"),
    ]
    for args, message in cases:
        r = horae(*args, db_url=db_url)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr

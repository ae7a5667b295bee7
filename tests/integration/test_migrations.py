"""Migrations and partitions on a real PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, time, timedelta

import asyncpg
import pytest
import pytest_asyncio

from horae.errors import ConfigError
from horae.store.db import connect
from horae.store.migrate import maintain_partitions, migrate, migrate_installation, migrations
from tests.conftest import BASE_DB
from tests.integration.test_cli import horae
from tests.support.groups import with_path


@pytest_asyncio.fixture
async def empty_db() -> AsyncIterator[str]:
    name = f"horae_empty_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(BASE_DB)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_path(BASE_DB, name)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def test_concurrent_migrations_apply_each_file_exactly_once(empty_db: str) -> None:
    results = await asyncio.gather(*(migrate(empty_db) for _ in range(4)))
    applied = [name for result in results for name in result]
    assert sorted(applied) == sorted(m.name for m in migrations())
    again = await migrate(empty_db)
    assert again == []
    conn = await connect(empty_db)
    try:
        versions = await conn.fetch("SELECT version FROM schema_migrations ORDER BY version")
        assert [r["version"] for r in versions] == [m.version for m in migrations()]
    finally:
        await conn.close()


async def test_schema_has_the_hot_path_partial_index(db_url: str) -> None:
    conn = await connect(db_url)
    try:
        indexdef = await conn.fetchval(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'executions_pending'"
        )
        assert "(shard, due_at, id)" in indexdef
        assert "WHERE (status = 'scheduled'::execution_status)" in indexdef
        strategy = await conn.fetchval(
            "SELECT partstrat::text FROM pg_partitioned_table"
            " WHERE partrelid = 'executions'::regclass"
        )
        assert strategy == "r"
        statuses = await conn.fetchval(
            "SELECT array_agg(enumlabel ORDER BY enumsortorder)::text[] FROM pg_enum "
            "WHERE enumtypid = 'execution_status'::regtype"
        )
        assert statuses == ["scheduled", "queued", "running", "succeeded", "failed",
                            "timed_out", "cancelled", "skipped", "dead"]  # fmt: skip
    finally:
        await conn.close()


async def partitions(conn: asyncpg.Connection) -> list[str]:
    rows = await conn.fetch(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = 'executions'::regclass ORDER BY 1"
    )
    return [r["relname"] for r in rows]


async def test_partitions_are_created_ahead_and_dropped_past_retention(db_url: str) -> None:
    # The session's template was migrated when the session began, perhaps the day before:
    # migrating again (as every deploy does) creates today's partitions ahead.
    today = datetime.now(UTC).date()
    assert await migrate(db_url, now=datetime.combine(today, time(), UTC)) == []
    conn = await connect(db_url)
    try:
        names = await partitions(conn)
        for offset in range(-1, 4):
            assert f"executions_{(today + timedelta(days=offset)):%Y%m%d}" in names
        later = today + timedelta(days=40)
        # All of them are older than later-30: those the template made when the session
        # began (perhaps the day before) and those made just now, today-1 .. today+3.
        old = [n for n in names if n[-8:].isdigit()]
        done = await maintain_partitions(conn, today=later, ahead_days=2, retention_days=30)
        assert done.created == [later + timedelta(days=d) for d in range(-1, 3)]
        assert done.dropped == len(old) >= 5
        assert f"executions_{today:%Y%m%d}" not in await partitions(conn)
    finally:
        await conn.close()


async def test_far_future_rows_wait_in_default_and_move_with_their_partition(
    db_url: str,
) -> None:
    conn = await connect(db_url)
    try:
        day = date(2031, 5, 17)
        due = datetime(2031, 5, 17, 12, tzinfo=UTC)
        exec_id = uuid.uuid4()
        await conn.execute(
            "INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at,"
            " attempt, job_version) VALUES ($1, $2, 't', 'x', 3, $3, $3, 1, 1)",
            exec_id, uuid.uuid4(), due,
        )  # fmt: skip
        where = "SELECT tableoid::regclass::text FROM executions WHERE id = $1"
        assert await conn.fetchval(where, exec_id) == "executions_default"
        assert await conn.fetchval("SELECT horae_create_partition($1)", day) is True
        assert await conn.fetchval(where, exec_id) == "executions_20310517"
        assert await conn.fetchval("SELECT horae_create_partition($1)", day) is False
    finally:
        await conn.close()


async def test_a_migrate_that_names_no_retention_keeps_the_installations(empty_db: str) -> None:
    """The chart's hook once ran `horae migrate` with no retention, so every upgrade dropped
    history past 30 days whatever the user had configured: retention is the installation's,
    and a run that does not name one keeps it."""
    today = datetime.now(UTC).date()
    done = await migrate_installation(empty_db, retention_days=90)
    assert done.installation.retention_days == 90
    conn = await connect(empty_db)
    try:
        old = today - timedelta(days=60)
        assert await conn.fetchval("SELECT horae_create_partition($1)", old) is True
        again = await migrate_installation(empty_db)
        assert (again.installation.retention_days, again.dropped) == (90, 0)
        assert f"executions_{old:%Y%m%d}" in await partitions(conn)
        shorter = await migrate_installation(empty_db, retention_days=45)
        assert (shorter.installation.retention_days, shorter.dropped) == (45, 1)
        assert f"executions_{old:%Y%m%d}" not in await partitions(conn)
    finally:
        await conn.close()


async def test_the_shard_count_is_fixed_when_the_installation_is_created(empty_db: str) -> None:
    assert (await migrate_installation(empty_db, shards=16)).installation.shards == 16
    assert (await migrate_installation(empty_db)).installation.shards == 16
    with pytest.raises(ConfigError, match="this installation has 16 shards"):
        await migrate_installation(empty_db, shards=64)


async def test_the_cli_places_jobs_by_the_installations_shard_count(empty_db: str) -> None:
    """A CLI left at the default 64 shards once put jobs on shards no scheduler of a smaller
    installation owns: the shard count comes from the database."""
    r = horae("migrate", "--shards", "4", "--retention-days", "7", db_url=empty_db)
    assert r.returncode == 0, r.stderr
    assert "installation: 4 shards, 7 days of history kept" in r.stdout
    for _ in range(12):
        r = horae("jobs", "create", "--task", "t", "--cron", "0 * * * *", "-o", "json",
                  db_url=empty_db)  # fmt: skip
        assert r.returncode == 0, r.stderr
    conn = await connect(empty_db)
    try:
        shards = {r["shard"] for r in await conn.fetch("SELECT shard FROM jobs")}
        assert shards <= {0, 1, 2, 3} and len(shards) > 1, shards
    finally:
        await conn.close()
    refused = horae("migrate", env={"HORAE_SHARDS": "64"}, db_url=empty_db)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "horae: HORAE_SHARDS: this installation has 4 shards, fixed when it was created;"
        " 64 was asked (leave it unset, or set it to 4)"
    ]

"""The job API, the operator's job writes and `horae jobs` over a store split in two groups
on two real PostgreSQL clusters: the even shards in `main` (the test database), the odd
ones in `second` (tests/support/groups.split_store)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import httpx
import pytest
import pytest_asyncio

from horae.errors import QuotaExceeded
from horae.models import JobSource, JobSpec, shard_of
from horae.operator.scheduledjob import cancel, sync_job
from horae.resources import ScheduledJobSpec
from horae.store import jobs, routing
from horae.store import tenants as store_tenants
from horae.store.groups import Store
from horae.store.moves import move_shards
from horae.store.new_jobs import NewJob
from tests.integration.api.conftest import Tenants, bearer
from tests.support.groups import SECOND, job_in
from tests.support.processes import HORAE, REPO

CRON = {"task": "t", "cron": "0 0 * * * *"}


@pytest.fixture
def api(second_url: str, api: httpx.AsyncClient) -> httpx.AsyncClient:
    """The API (tests/integration/api/conftest.py), started once the store has its two
    groups."""
    return api


@pytest_asyncio.fixture
async def store(db_url: str, second_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(db_url, size=2)
    yield opened
    await opened.close()


def group_of(job_id: uuid.UUID | str) -> str:
    return SECOND if shard_of(uuid.UUID(str(job_id)), 64) % 2 else "main"


async def where(groups: dict[str, asyncpg.Connection], job_id: uuid.UUID | str) -> list[str]:
    """The groups holding the job's row."""
    return [
        name
        for name, conn in groups.items()
        if await conn.fetchval("SELECT count(*) FROM jobs WHERE id = $1", uuid.UUID(str(job_id)))
    ]


async def one_in_each_group(http: httpx.AsyncClient, token: str) -> dict[str, str]:
    """Jobs created through the API until each group holds one: group -> job id."""
    found: dict[str, str] = {}
    for _ in range(64):
        r = await http.post("/jobs", json=CRON, headers=bearer(token))
        assert r.status_code == 201, r.text
        found.setdefault(group_of(r.json()["id"]), r.json()["id"])
        if len(found) == 2:
            return found
    raise AssertionError("64 jobs, all in one group")


async def test_jobs_created_through_the_api_land_in_the_group_of_their_shard(
    api: httpx.AsyncClient, tenants: Tenants, groups: dict[str, asyncpg.Connection]
) -> None:
    single = [
        (await api.post("/jobs", json=CRON, headers=bearer(tenants.alice))).json()["id"]
        for _ in range(8)
    ]
    r = await api.post("/jobs:batch", json={"jobs": [CRON] * 20}, headers=bearer(tenants.alice))
    assert r.status_code == 201, r.text
    ids = single + r.json()["ids"]
    assert {group_of(i) for i in ids} == {"main", SECOND}
    for job_id in ids:
        assert await where(groups, job_id) == [group_of(job_id)]
        # Its first execution is beside it.
        executions = await groups[group_of(job_id)].fetchval(
            "SELECT count(*) FROM executions WHERE job_id = $1", uuid.UUID(job_id)
        )
        assert executions == 1


async def test_a_small_page_size_lists_every_job_once_in_a_stable_order(
    api: httpx.AsyncClient, tenants: Tenants
) -> None:
    created: list[str] = []
    for _ in range(3):  # three creation instants, five jobs each
        r = await api.post("/jobs:batch", json={"jobs": [CRON] * 5}, headers=bearer(tenants.alice))
        created += r.json()["ids"]
    pages: list[list[dict[str, str]]] = []
    cursor: str | None = None
    while True:
        params = {"limit": "4"} | ({"cursor": cursor} if cursor else {})
        r = await api.get("/jobs", params=params, headers=bearer(tenants.alice))
        assert r.status_code == 200, r.text
        pages.append(r.json()["items"])
        cursor = r.json()["next_cursor"]
        if cursor is None:
            break
    listed = [(j["created_at"], j["id"]) for page in pages for j in page]
    assert [len(p) for p in pages] == [4, 4, 4, 3]
    assert sorted(i for _, i in listed) == sorted(created)  # each once
    assert listed == sorted(listed, key=lambda x: (datetime.fromisoformat(x[0]), x[1]))
    assert {group_of(i) for _, i in listed} == {"main", SECOND}


async def test_a_job_in_either_group_is_read_paused_resumed_triggered_and_cancelled(
    api: httpx.AsyncClient, tenants: Tenants, groups: dict[str, asyncpg.Connection]
) -> None:
    h = bearer(tenants.alice)
    for group, job_id in (await one_in_each_group(api, tenants.alice)).items():
        assert (await api.get(f"/jobs/{job_id}", headers=h)).json()["state"] == "active"
        assert (await api.post(f"/jobs/{job_id}:pause", headers=h)).status_code == 204
        assert (await api.get(f"/jobs/{job_id}", headers=h)).json()["state"] == "paused"
        assert (await api.post(f"/jobs/{job_id}:resume", headers=h)).status_code == 204
        r = await api.patch(f"/jobs/{job_id}", json={"payload": {"n": 1}}, headers=h)
        assert r.status_code == 200 and r.json()["payload"] == {"n": 1}, r.text
        r = await api.post(f"/jobs/{job_id}:trigger", headers=h)
        assert r.status_code == 201, r.text
        execution_id = r.json()["id"]
        r = await api.get(f"/executions/{execution_id}", headers=h)
        assert r.status_code == 200 and r.json()["job_id"] == job_id
        assert (await api.delete(f"/jobs/{job_id}", headers=h)).status_code == 204
        state = await groups[group].fetchval(
            "SELECT state FROM jobs WHERE id = $1", uuid.UUID(job_id)
        )
        assert state == "cancelled"
        # Another tenant's caller still gets 404, whichever group the job is in.
        assert (await api.get(f"/jobs/{job_id}", headers=bearer(tenants.bob))).status_code == 404


async def test_after_a_move_a_jobs_executions_show_old_history_and_new_live_rows(
    db_url: str, api: httpx.AsyncClient, tenants: Tenants, groups: dict[str, asyncpg.Connection]
) -> None:
    h = bearer(tenants.alice)
    job_id = (await one_in_each_group(api, tenants.alice))["main"]
    shard = shard_of(uuid.UUID(job_id), 64)
    done = await groups["main"].fetchval(
        "UPDATE executions SET status = 'succeeded', started_at = now(), finished_at = now()"
        " WHERE job_id = $1 RETURNING id",
        uuid.UUID(job_id),
    )
    live = (await api.post(f"/jobs/{job_id}:trigger", headers=h)).json()["id"]

    await move_shards(db_url, [shard], SECOND)  # the API's catalog is now stale

    # The history stayed in main, the live execution went with the job.
    assert await where(groups, job_id) == [SECOND]
    left = await groups["main"].fetch(
        "SELECT id FROM executions WHERE job_id = $1", uuid.UUID(job_id)
    )
    assert [r["id"] for r in left] == [done]
    r = await api.get(f"/jobs/{job_id}/executions", headers=h)
    assert r.status_code == 200, r.text
    assert {(e["id"], e["status"]) for e in r.json()["items"]} == {
        (str(done), "succeeded"),
        (live, "scheduled"),
    }
    assert (await api.get(f"/executions/{done}", headers=h)).json()["status"] == "succeeded"
    # Writes follow the job to its new group.
    assert (await api.post(f"/jobs/{job_id}:pause", headers=h)).status_code == 204
    state = await groups[SECOND].fetchval("SELECT state FROM jobs WHERE id = $1", uuid.UUID(job_id))
    assert state == "paused"


async def test_a_failure_left_as_history_by_a_move_is_run_again_beside_its_job(
    db_url: str, api: httpx.AsyncClient, tenants: Tenants, groups: dict[str, asyncpg.Connection]
) -> None:
    h = bearer(tenants.alice)
    job_id = (await one_in_each_group(api, tenants.alice))["main"]
    failed = (await api.post(f"/jobs/{job_id}:trigger", headers=h)).json()["id"]
    occurrence = await groups["main"].fetchval(
        "UPDATE executions SET status = 'dead', started_at = now(), finished_at = now()"
        " WHERE id = $1 RETURNING occurrence_at",
        uuid.UUID(failed),
    )
    await move_shards(db_url, [shard_of(uuid.UUID(job_id), 64)], SECOND)

    r = await api.post(f"/executions/{failed}:rerun", headers=h)
    assert r.status_code == 201, r.text
    again = await groups[SECOND].fetchrow(
        "SELECT job_id, occurrence_at, attempt, status FROM executions WHERE id = $1",
        uuid.UUID(r.json()["id"]),
    )
    assert dict(again) == {
        "job_id": uuid.UUID(job_id),
        "occurrence_at": occurrence,
        "attempt": 2,
        "status": "scheduled",
    }
    # The history is untouched where it is; attempt 2 is now the one to run again.
    status = await groups["main"].fetchval(
        "SELECT status FROM executions WHERE id = $1", uuid.UUID(failed)
    )
    assert status == "dead"
    r = await api.post(f"/executions/{failed}:rerun", headers=h)
    assert r.status_code == 409, r.text
    assert "attempt 2" in r.json()["detail"]


async def test_a_tenants_quota_counts_its_jobs_in_both_groups(
    api: httpx.AsyncClient, tenants: Tenants, store: Store
) -> None:
    r = await api.put(
        f"/tenants/{tenants.a}",
        json={"max_running": None, "max_jobs": 2},
        headers=bearer(tenants.admin),
    )
    assert r.status_code == 200, r.text
    now = datetime.now(UTC)
    spec = JobSpec(task="t", cron="0 0 * * * *")

    def new(shard: int) -> NewJob:
        return NewJob(spec=spec, tenant=tenants.a, source=JobSource.API, job_id=job_in(shard))

    await routing.create_jobs(store, [new(0)], now=now)  # main
    await routing.create_jobs(store, [new(1)], now=now)  # second: 2 of 2, counting both
    for shard in (2, 3):  # in either group, a third is over the quota
        with pytest.raises(QuotaExceeded):
            await routing.create_jobs(store, [new(shard)], now=now)
    r = await api.post("/jobs", json=CRON, headers=bearer(tenants.alice))
    assert r.status_code == 429, r.text
    r = await api.put(
        f"/tenants/{tenants.a}",
        json={"max_running": None, "max_jobs": 3},
        headers=bearer(tenants.admin),
    )
    assert r.json()["jobs"] == 2  # used, summed over the groups


async def test_a_create_refused_by_another_groups_bound_is_checked_again_by_its_count(
    tenants: Tenants, store: Store, groups: dict[str, asyncpg.Connection]
) -> None:
    """A create reads the other groups' use bounds (`tenant_use`), which completions and
    cancels leave high; what they refuse is checked again with the use counted there."""
    async with store.database("main").acquire() as conn:
        await store_tenants.set_tenant_limit(conn, tenants.a, None, max_jobs=2)
    now = datetime.now(UTC)
    spec = JobSpec(task="t", cron="0 0 * * * *")

    def new(shard: int) -> NewJob:
        return NewJob(spec=spec, tenant=tenants.a, source=JobSource.API, job_id=job_in(shard))

    await routing.create_jobs(store, [new(0)], now=now)  # main
    second = new(1)
    await routing.create_jobs(store, [second], now=now)  # second: its bound there is 1
    await jobs.cancel_job(groups["second"], second.job_id, now=now)
    bound = "SELECT jobs FROM tenant_use WHERE tenant = $1"
    assert await groups["second"].fetchval(bound, tenants.a) == 1  # left high: 0 live
    await routing.create_jobs(store, [new(2)], now=now)  # 2 in main + 1 by the bound: counted
    live = "SELECT count(*) FROM jobs WHERE tenant = $1 AND state = 'active'"
    assert [await groups[g].fetchval(live, tenants.a) for g in ("main", "second")] == [2, 0]
    with pytest.raises(QuotaExceeded, match="max_jobs=2"):
        await routing.create_jobs(store, [new(4)], now=now)  # counted too: over


async def test_the_operator_keeps_a_scheduledjobs_job_in_the_group_of_its_uid(
    store: Store, groups: dict[str, asyncpg.Connection]
) -> None:
    uid = job_in(5)  # a resource's uid in an odd shard: group second
    spec = ScheduledJobSpec.model_validate({"task": "t", "schedule": "0 0 * * * *"})
    row, created = await sync_job(store, uid, "ns", "nightly", spec, trigger_value="v0")
    assert row.state == "active" and created and await where(groups, uid) == [SECOND]
    assert row.manual_trigger == "v0"  # a value it is created with is recorded, not run
    edited = spec.model_copy(update={"payload": {"n": 2}, "suspend": True})
    row, created = await sync_job(store, uid, "ns", "nightly", edited, trigger_value="v1")
    assert (row.state, row.payload, row.spec_version) == ("paused", {"n": 2}, 2)
    assert not created and row.manual_trigger == "v0"  # an edit runs no trigger
    # Recreated under the same name (a new uid, in main): the old job is cancelled.
    again = job_in(4)
    await sync_job(store, again, "ns", "nightly", spec)
    assert await where(groups, again) == ["main"]
    old = await groups[SECOND].fetchval("SELECT state FROM jobs WHERE id = $1", uid)
    assert old == "cancelled"
    assert await cancel(store, again)
    assert (await routing.get_job(store, again)).state == "cancelled"


def test_horae_jobs_ls_shows_the_jobs_of_both_groups(db_url: str, second_url: str) -> None:
    env = {**os.environ, "HORAE_DATABASE_URL": db_url}

    def horae(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [HORAE, *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=60
        )

    ids: list[str] = []
    while {group_of(i) for i in ids} != {"main", SECOND}:
        assert len(ids) < 64
        r = horae("jobs", "create", "--task", "t", "--cron", "0 0 * * *", "--tenant", "acme",
                  "-o", "json")  # fmt: skip
        assert r.returncode == 0, r.stderr
        ids.append(json.loads(r.stdout)["id"])
    r = horae("jobs", "ls", "--tenant", "acme", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert sorted(j["id"] for j in json.loads(r.stdout)) == sorted(ids)
    # Found, paused and cancelled in its own group.
    for job_id in (ids[0], ids[-1]):  # the last is the first in the other group
        assert horae("jobs", "pause", job_id).returncode == 0
        assert json.loads(horae("jobs", "get", job_id, "-o", "json").stdout)["state"] == "paused"
        assert horae("jobs", "cancel", job_id).stdout.strip() == f"job {job_id} cancelled"


async def test_a_stale_catalog_finds_and_creates_a_moved_shards_jobs_in_its_new_group(
    db_url: str, store: Store, groups: dict[str, asyncpg.Connection]
) -> None:
    now = datetime.now(UTC)
    spec = JobSpec(task="t", cron="0 0 * * * *")
    job_id = job_in(6)
    await routing.create_jobs(
        store, [NewJob(spec=spec, tenant="acme", source=JobSource.API, job_id=job_id)], now=now
    )
    before = store.catalog.version
    await move_shards(db_url, [6], SECOND)  # this store does not follow the catalog
    assert store.catalog.group_of(6) == "main"
    # A read routed to main finds nothing there, sees the catalog moved, asks second.
    assert (await routing.get_job(store, job_id)).id == job_id
    assert store.catalog.version > before and store.catalog.group_of(6) == SECOND
    # A create routed by a stale catalog is refused in second (ShardMoved), made in main.
    await move_shards(db_url, [6], "main")
    other = job_in(6)
    new = NewJob(spec=spec, tenant="acme", source=JobSource.API, job_id=other)
    await routing.create_jobs(store, [new], now=now)
    assert await where(groups, other) == ["main"]
    assert store.catalog.group_of(6) == "main"

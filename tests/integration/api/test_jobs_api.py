"""The job lifecycle through the HTTP API, on real Postgres and a real API server."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx

from horae.domain.limits import stored_result
from horae.models import ExecutionStatus, JobSource, JobSpec
from horae.store import jobs
from horae.store.executions import Claimed
from tests.integration.api.conftest import Tenants, bearer
from tests.support import transitions

CRON = {"task": "report", "cron": "*/5 * * * *", "payload": {"to": "ops"}}


async def test_create_answers_201_with_the_id_and_stores_job_and_execution(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    r = await api.post("/jobs", json=CRON, headers=bearer(tenants.alice))
    assert r.status_code == 201, r.text
    job_id = uuid.UUID(r.json()["id"])
    job = await pool.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id)
    assert job["tenant"] == tenants.a and job["source"] == "api" and job["cron"] == "*/5 * * * *"
    statuses = await pool.fetch("SELECT status FROM executions WHERE job_id = $1", job_id)
    assert [s["status"] for s in statuses] == ["scheduled"]

    got = (await api.get(f"/jobs/{job_id}", headers=bearer(tenants.alice))).json()
    assert got["task"] == "report" and got["state"] == "active" and got["spec_version"] == 1
    runs = [datetime.fromisoformat(t) for t in got["next_runs"]]
    assert len(runs) == 5 and all(t.minute % 5 == 0 and t.second == 0 for t in runs)
    assert all(b - a == timedelta(minutes=5) for a, b in itertools.pairwise(runs))


async def test_idempotency_key_same_body_same_id_other_body_conflict(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    headers = {**bearer(tenants.alice), "Idempotency-Key": "order-42"}
    first = await api.post("/jobs", json=CRON, headers=headers)
    again = await api.post("/jobs", json=CRON, headers=headers)
    assert first.status_code == 201 and again.status_code == 200
    assert first.json()["id"] == again.json()["id"]
    other = await api.post("/jobs", json={**CRON, "payload": {"to": "dev"}}, headers=headers)
    assert other.status_code == 409
    assert other.headers["content-type"] == "application/problem+json"
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 1


async def test_concurrent_creates_with_one_key_make_one_job(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    headers = {**bearer(tenants.alice), "Idempotency-Key": "race"}
    results = await asyncio.gather(*(api.post("/jobs", json=CRON, headers=headers)
                                     for _ in range(8)))  # fmt: skip
    assert {r.status_code for r in results} <= {200, 201}
    assert len({r.json()["id"] for r in results}) == 1
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 1


async def test_concurrent_single_creates_are_committed_together_each_with_its_own_job(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    """Creates without an Idempotency-Key are group-committed: 60 at once, as two tenants,
    each answered with its own id only once its job and first execution are stored."""
    callers = [(tenants.alice, tenants.a), (tenants.bob, tenants.b)] * 30
    results = await asyncio.gather(*(
        api.post("/jobs", json={**CRON, "payload": {"n": i}}, headers=bearer(token))
        for i, (token, _) in enumerate(callers)
    ))  # fmt: skip
    assert [r.status_code for r in results] == [201] * 60
    ids = [uuid.UUID(r.json()["id"]) for r in results]
    assert len(set(ids)) == 60
    rows = {r["id"]: r for r in await pool.fetch("SELECT id, tenant, payload FROM jobs")}
    for i, (job_id, (_, tenant)) in enumerate(zip(ids, callers, strict=True)):
        assert (rows[job_id]["tenant"], rows[job_id]["payload"]) == (tenant, {"n": i})
    assert await pool.fetchval("SELECT count(DISTINCT job_id) FROM executions") == 60


async def test_batch_creates_all_in_one_transaction(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    jobs = [{"task": "t", "run_at": (datetime.now(UTC) + timedelta(hours=i + 1)).isoformat()}
            for i in range(50)]  # fmt: skip
    r = await api.post("/jobs:batch", json={"jobs": jobs}, headers=bearer(tenants.alice))
    assert r.status_code == 201, r.text
    assert len(r.json()["ids"]) == 50
    assert await pool.fetchval("SELECT count(*) FROM executions WHERE status = 'scheduled'") == 50


async def test_lifecycle_pause_resume_trigger_patch_delete(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    h = bearer(tenants.alice)
    job_id = (await api.post("/jobs", json=CRON, headers=h)).json()["id"]

    assert (await api.post(f"/jobs/{job_id}:pause", headers=h)).status_code == 204
    assert (await api.get(f"/jobs/{job_id}", headers=h)).json()["state"] == "paused"
    assert (await api.post(f"/jobs/{job_id}:trigger", headers=h)).status_code == 409
    assert (await api.post(f"/jobs/{job_id}:resume", headers=h)).status_code == 204

    triggered = await api.post(f"/jobs/{job_id}:trigger", headers=h)
    assert triggered.status_code == 201
    execution = (await api.get(f"/executions/{triggered.json()['id']}", headers=h)).json()
    assert execution["status"] == "scheduled" and execution["job_id"] == job_id
    due = datetime.fromisoformat(execution["due_at"])
    assert abs(datetime.now(UTC) - due) < timedelta(seconds=5)

    patched = await api.patch(f"/jobs/{job_id}", json={"cron": "0 3 * * *", "time_zone":
                              "Europe/London"}, headers=h)  # fmt: skip
    assert patched.status_code == 200, patched.text
    assert patched.json()["spec_version"] == 2 and patched.json()["cron"] == "0 3 * * *"

    page = (await api.get(f"/jobs/{job_id}/executions?status=cancelled", headers=h)).json()
    reasons = sorted(e["error"]["kind"] for e in page["items"])
    # the pending occurrence and the triggered run were both superseded by the edit
    assert reasons == ["paused", "superseded", "superseded"]

    assert (await api.delete(f"/jobs/{job_id}", headers=h)).status_code == 204
    assert (await api.get(f"/jobs/{job_id}", headers=h)).json()["state"] == "cancelled"
    live = await pool.fetchval(
        "SELECT count(*) FROM executions WHERE job_id = $1 AND status = 'scheduled'",
        uuid.UUID(job_id),
    )
    assert live == 0
    history = (await api.get(f"/jobs/{job_id}/executions", headers=h)).json()["items"]
    assert len(history) == 4, "cancel keeps the history"


async def test_patch_null_resets_a_field_to_its_default(
    api: httpx.AsyncClient, tenants: Tenants
) -> None:
    h = bearer(tenants.alice)
    tuned = {**CRON, "timeout_seconds": 30, "starting_deadline_seconds": 60, "jitter_seconds": 5,
             "catch_up": "All", "catch_up_window_seconds": 3600, "concurrency_policy": "Forbid",
             "time_zone": "Europe/Paris", "retry": {"max_attempts": 7}}  # fmt: skip
    job_id = (await api.post("/jobs", json=tuned, headers=h)).json()["id"]
    reset = {field: None for field in tuned if field not in ("task", "cron", "payload")}
    patched = await api.patch(f"/jobs/{job_id}", json=reset, headers=h)
    assert patched.status_code == 200, patched.text
    job = (await api.get(f"/jobs/{job_id}", headers=h)).json()
    assert job["spec_version"] == 2
    assert {field: job[field] for field in reset} == {
        "timeout_seconds": None, "starting_deadline_seconds": None, "jitter_seconds": 0,
        "catch_up": "Latest", "catch_up_window_seconds": None, "concurrency_policy": "Allow",
        "time_zone": "UTC",
        "retry": {"max_attempts": 5, "initial_interval_seconds": 1.0,
                  "max_interval_seconds": 300.0},
    }  # fmt: skip
    assert job["task"] == CRON["task"] and job["cron"] == CRON["cron"]


async def test_every_concurrency_policy_is_stored_and_shown(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    h = bearer(tenants.alice)
    for policy in ("Allow", "Forbid", "Replace", "BufferOne"):
        created = await api.post("/jobs", json={**CRON, "concurrency_policy": policy}, headers=h)
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        assert (await api.get(f"/jobs/{job_id}", headers=h)).json()["concurrency_policy"] == policy
        stored = await pool.fetchrow(
            "SELECT j.concurrency_policy AS job, e.concurrency_policy AS execution"
            " FROM jobs j JOIN executions e ON e.job_id = j.id WHERE j.id = $1",
            uuid.UUID(job_id),
        )
        assert (stored["job"], stored["execution"]) == (policy, policy)


async def test_lists_page_with_cursors(api: httpx.AsyncClient, tenants: Tenants) -> None:
    h = bearer(tenants.alice)
    created = [(await api.post("/jobs", json=CRON, headers=h)).json()["id"] for _ in range(5)]
    seen, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await api.get("/jobs", params=params, headers=h)).json()
        seen += [j["id"] for j in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == created


async def test_schedule_preview_creates_nothing(api: httpx.AsyncClient, pool: asyncpg.Pool) -> None:
    r = await api.post("/schedules:preview", json={
        "cron": "30 1 * * *", "time_zone": "America/New_York",
        "after": "2026-10-31T12:00:00Z", "count": 2,
    })  # fmt: skip
    assert r.status_code == 200
    assert r.json()["fire_times"] == ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0


async def test_a_tenant_limit_is_an_administrators_setting(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    """Rights inside a namespace (alice may update `tenants` in her own) once let a tenant
    lift its own limit: the limit needs the permission granted cluster-wide."""
    own = await api.put(f"/tenants/{tenants.a}", json={"max_running": 500},
                        headers=bearer(tenants.alice))  # fmt: skip
    assert own.status_code == 403, own.text
    assert "may not update tenants cluster-wide" in own.json()["detail"]
    assert await pool.fetchval("SELECT count(*) FROM tenants") == 0
    for name in (tenants.a, tenants.b):
        r = await api.put(f"/tenants/{name}", json={"max_running": 5},
                          headers=bearer(tenants.admin))  # fmt: skip
        assert r.status_code == 200, r.text
        assert r.json() == {
            "name": name,
            "max_running": 5,
            "running": 0,
            "max_jobs": 100_000,
            "jobs": 0,
            "max_fires_per_minute": 100_000,
            "fires_per_minute": 0.0,
        }
    limits = await pool.fetch("SELECT name, max_running FROM tenants ORDER BY name")
    assert [tuple(r) for r in limits] == [(tenants.a, 5), (tenants.b, 5)]
    jobs_of_a = await api.get("/jobs", headers={**bearer(tenants.admin), "Horae-Tenant": tenants.a})
    assert jobs_of_a.status_code == 403  # the tenant admin holds no rights on jobs


async def test_a_dead_one_off_is_run_again_by_rerun_while_trigger_refuses(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    """docs/operations.md tells users to run a dead occurrence again: a one-off whose final
    outcome is recorded is `completed`, which trigger refuses, so re-running is its own
    route, on the execution."""
    h = bearer(tenants.alice)
    run_at = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    job_id = (await api.post("/jobs", json={"task": "t", "run_at": run_at}, headers=h)).json()["id"]
    dead_id = await pool.fetchval("SELECT id FROM executions WHERE job_id = $1", uuid.UUID(job_id))
    # The state a worker leaves a one-off in after its last attempt died.
    await pool.execute(
        "UPDATE executions SET status = 'dead', attempt = 3, started_at = now(),"
        " finished_at = now(), error_kind = 'E', error_message = 'boom' WHERE id = $1",
        dead_id,
    )
    await pool.execute("UPDATE jobs SET state = 'completed' WHERE id = $1", uuid.UUID(job_id))
    assert (await api.post(f"/jobs/{job_id}:trigger", headers=h)).status_code == 409

    r = await api.post(f"/executions/{dead_id}:rerun", headers=h)
    assert r.status_code == 201, r.text
    new = (await api.get(f"/executions/{r.json()['id']}", headers=h)).json()
    old = (await api.get(f"/executions/{dead_id}", headers=h)).json()
    assert (new["status"], new["attempt"]) == ("scheduled", 4)
    assert new["occurrence_at"] == old["occurrence_at"] and old["status"] == "dead"
    assert datetime.fromisoformat(new["due_at"]) <= datetime.now(UTC)
    assert (await api.get(f"/jobs/{job_id}", headers=h)).json()["state"] == "active"

    again = await api.post(f"/executions/{dead_id}:rerun", headers=h)
    assert again.status_code == 409 and r.json()["id"] in again.json()["detail"]
    pending = await api.post(f"/executions/{r.json()['id']}:rerun", headers=h)
    assert pending.status_code == 409 and "is scheduled" in pending.json()["detail"]
    other = await api.post(f"/executions/{dead_id}:rerun", headers=bearer(tenants.bob))
    assert other.status_code == 404
    statuses = await pool.fetch(
        "SELECT status FROM executions WHERE job_id = $1 ORDER BY attempt", uuid.UUID(job_id)
    )
    assert [s["status"] for s in statuses] == ["dead", "scheduled"]


async def test_a_paused_jobs_failed_occurrence_is_not_run_again(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    h = bearer(tenants.alice)
    job_id = (await api.post("/jobs", json=CRON, headers=h)).json()["id"]
    failed = await pool.fetchval(
        "UPDATE executions SET status = 'failed', started_at = now(), finished_at = now(),"
        " error_kind = 'E', error_message = 'no' WHERE job_id = $1 RETURNING id",
        uuid.UUID(job_id),
    )
    assert (await api.post(f"/jobs/{job_id}:pause", headers=h)).status_code == 204
    r = await api.post(f"/executions/{failed}:rerun", headers=h)
    assert r.status_code == 409 and "paused" in r.json()["detail"], r.text
    assert (await api.post(f"/jobs/{job_id}:resume", headers=h)).status_code == 204
    assert (await api.post(f"/executions/{failed}:rerun", headers=h)).status_code == 201


async def test_a_scheduledjobs_job_is_changed_through_its_manifest_only(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    """Edits through the API to a ScheduledJob's job once diverged silently from the manifest
    (and a DELETE left the resource retrying forever): they answer 409 naming it."""
    async with pool.acquire() as conn:
        job_id = await jobs.create_job(
            conn, JobSpec(task="report", cron="*/5 * * * *"), tenant=tenants.a,
            source=JobSource.CRD, shards=64, now=datetime.now(UTC), name="nightly",
        )  # fmt: skip
    before = await pool.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id)
    h = bearer(tenants.alice)
    for method, path, body in [
        ("PATCH", f"/jobs/{job_id}", {"cron": "0 * * * *"}),
        ("POST", f"/jobs/{job_id}:pause", None),
        ("POST", f"/jobs/{job_id}:resume", None),
        ("DELETE", f"/jobs/{job_id}", None),
    ]:
        r = await api.request(method, path, headers=h, json=body)
        assert r.status_code == 409, (method, path, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert f"kubectl edit scheduledjob/nightly -n {tenants.a}" in r.json()["detail"], r.text
    assert await pool.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id) == before
    assert (await api.get(f"/jobs/{job_id}", headers=h)).status_code == 200
    assert (await api.post(f"/jobs/{job_id}:trigger", headers=h)).status_code == 201


async def test_a_pause_reason_is_shown_until_the_job_is_resumed(
    api: httpx.AsyncClient, tenants: Tenants
) -> None:
    h = bearer(tenants.alice)
    body = {**CRON, "failure_policy": {"pause_after_consecutive_failures": 3}}
    job_id = (await api.post("/jobs", json=body, headers=h)).json()["id"]
    got = (await api.get(f"/jobs/{job_id}", headers=h)).json()
    assert got["failure_policy"] == {"pause_after_consecutive_failures": 3}
    assert (got["consecutive_failures"], got["paused_reason"]) == (0, None)
    r = await api.post(f"/jobs/{job_id}:pause", json={"reason": "vendor outage"}, headers=h)
    assert r.status_code == 204, r.text
    got = (await api.get(f"/jobs/{job_id}", headers=h)).json()
    assert (got["state"], got["paused_reason"], got["paused_for_failures"]) == (
        "paused", "vendor outage", False)  # fmt: skip
    assert (await api.post(f"/jobs/{job_id}:resume", headers=h)).status_code == 204
    got = (await api.get(f"/jobs/{job_id}", headers=h)).json()
    assert (got["state"], got["paused_reason"]) == ("active", None)
    # an edit may clear the policy (null: its default, none)
    r = await api.patch(f"/jobs/{job_id}", json={"failure_policy": None}, headers=h)
    assert r.status_code == 200 and r.json()["failure_policy"] is None, r.text


async def test_an_executions_result_is_what_its_handler_returned(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    h = bearer(tenants.alice)
    run_at = datetime.now(UTC) + timedelta(seconds=1)
    body = {"task": "t", "run_at": run_at.isoformat()}
    job_id = (await api.post("/jobs", json=body, headers=h)).json()["id"]
    row = await pool.fetchrow("SELECT id, due_at FROM executions WHERE job_id = $1",
                              uuid.UUID(job_id))  # fmt: skip
    async with pool.acquire() as conn:  # as a worker records a handler's return value
        claimed = await transitions.claim(conn, row["id"], row["due_at"], owner="w",
                                          now=row["due_at"], lease=timedelta(seconds=30),
                                          tenant=tenants.a)  # fmt: skip
        assert isinstance(claimed, Claimed)
        returned = {"sent": 3, "ids": (7, 8)}
        assert await transitions.finish(
            conn,
            claimed,
            owner="w",
            status=ExecutionStatus.SUCCEEDED,
            now=row["due_at"],
            result=stored_result(returned),
        )
    got = (await api.get(f"/executions/{row['id']}", headers=h)).json()
    assert (got["status"], got["result"]) == ("succeeded", {"sent": 3, "ids": [7, 8]})
    [listed] = (await api.get(f"/jobs/{job_id}/executions", headers=h)).json()["items"]
    assert listed["result"] == got["result"]

"""Backfills through the HTTP API and the CLI, fed by a real scheduler process and run by a
real worker process: a 30-day hourly range completes at its rate, another is cancelled half
way; bad requests are refused naming the field; a tenant never sees another's backfill."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx

from tests.integration.api.conftest import Tenants, bearer
from tests.integration.test_cli import horae
from tests.support.kube import ControlPlane
from tests.support.processes import Processes
from tests.support.wait import until

HOURLY = {"task": "e2e.echo", "cron": "0 * * * *"}
DAYS = 30


def last_30_days() -> dict[str, str]:
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    return {"from": (end - timedelta(days=DAYS)).isoformat(), "to": end.isoformat()}


async def start_scheduler_and_worker(
    processes: Processes, control_plane: ControlPlane, namespace: str, tenants: str
) -> None:
    processes.start("scheduler", "scheduler")
    processes.start("worker", "worker", "--tasks", "tests/e2e/tasks.py",
                    env={"HORAE_TENANTS": tenants})  # fmt: skip

    async def all_shards_held() -> bool:
        leases = control_plane.get_json("leases", "-n", namespace)["items"]
        return (
            sum(
                1
                for x in leases
                if x["metadata"]["name"].startswith("horae-shard-")
                and x["spec"].get("holderIdentity")
            )
            == 64
        )

    await until(all_shards_held, timeout=30, what="64 shard Leases held")


async def test_a_30_day_hourly_backfill_completes_at_its_rate_and_another_is_cancelled_half_way(
    api: httpx.AsyncClient,
    tenants: Tenants,
    pool: asyncpg.Pool,
    processes: Processes,
    control_plane: ControlPlane,
    namespace: str,
    db_url: str,
) -> None:
    h, hb = bearer(tenants.alice), bearer(tenants.bob)
    # The slow backfill's tenant runs one execution at a time, of a 0.2 s task: most of
    # what it created still waits, `scheduled`, when it is cancelled.
    limit = {"max_running": 1}
    r = await api.put(f"/tenants/{tenants.b}", json=limit, headers=bearer(tenants.admin))
    assert r.status_code == 200, r.text
    await start_scheduler_and_worker(
        processes, control_plane, namespace, f"{tenants.a},{tenants.b}"
    )
    fast_job = (await api.post("/jobs", json=HOURLY, headers=h)).json()["id"]
    slow_task = {**HOURLY, "task": "e2e.slow", "payload": {"seconds": 0.2}}
    slow_job = (await api.post("/jobs", json=slow_task, headers=hb)).json()["id"]
    next_run = await pool.fetchval(
        "SELECT next_run_at FROM jobs WHERE id = $1", uuid.UUID(fast_job)
    )

    r = await api.post(
        f"/jobs/{fast_job}:backfill", json={**last_30_days(), "rate": 100}, headers=h
    )
    assert r.status_code == 201, r.text
    fast = r.json()
    assert (fast["total"], fast["rate"], fast["overlap"], fast["state"]) == (
        720,
        100,
        "Allow",
        "running",
    )
    slow = (await api.post(f"/jobs/{slow_job}:backfill", json={**last_30_days(), "rate": 40},
                           headers=hb)).json()  # fmt: skip

    # Another tenant sees none of them, nor may it cancel one.
    assert (await api.get(f"/backfills/{fast['id']}", headers=hb)).status_code == 404
    assert (await api.post(f"/backfills/{slow['id']}:cancel", headers=h)).status_code == 404
    assert (await api.get(f"/jobs/{slow_job}/backfills", headers=h)).status_code == 404

    async def get(backfill_id: str, headers: dict[str, str] = h) -> dict[str, Any]:
        r = await api.get(f"/backfills/{backfill_id}", headers=headers)
        assert r.status_code == 200, r.text
        return dict(r.json())

    async def half_way() -> bool:
        return (await get(slow["id"], hb))["created"] >= 360

    await until(half_way, timeout=30, what="the slow backfill half way")
    r = await api.post(f"/backfills/{slow['id']}:cancel", headers=hb)
    assert r.status_code == 200, r.text
    cancelled = r.json()
    assert cancelled["state"] == "cancelled" and 360 <= cancelled["created"] < 720

    async def completed() -> dict[str, Any] | None:
        got = await get(fast["id"])
        return got if got["state"] == "completed" else None

    done = await until(completed, timeout=40, what="the fast backfill completed")
    assert (done["created"], done["existing"], done["succeeded"], done["live"]) == (720, 0, 720, 0)

    # Rate: by any instant t, at most 100/s since the backfill was made (plus one slice).
    for b, rate in ((fast, 100), (slow, 40)):
        made = datetime.fromisoformat(b["created_at"])
        times = [r["created_at"] for r in await pool.fetch(
            "SELECT created_at FROM executions WHERE backfill = $1 ORDER BY created_at",
            uuid.UUID(b["id"]))]  # fmt: skip
        for n, t in enumerate(times, 1):
            assert n <= rate * (t - made).total_seconds() + rate, (b["id"], n, t - made)
        if b is fast:
            assert len(times) == 720 and (times[-1] - made).total_seconds() >= 720 / rate - 1.5
    # Backfilled occurrences are the 720 past hours, once each, and left the job's schedule
    # alone: its one scheduled occurrence and next_run_at are what they were.
    own = await pool.fetch(
        "SELECT occurrence_at, backfill FROM executions WHERE job_id = $1", uuid.UUID(fast_job)
    )
    assert len({r["occurrence_at"] for r in own if r["backfill"]}) == 720
    assert [r["occurrence_at"] for r in own if r["backfill"] is None] == [next_run]
    assert (
        await pool.fetchval("SELECT next_run_at FROM jobs WHERE id = $1", uuid.UUID(fast_job))
        == next_run
    )

    # The cancelled one: nothing was created after the cancel, and what had not been
    # dispatched then ended cancelled, saying why.
    ended = datetime.fromisoformat(cancelled["finished_at"])
    slow_rows = await pool.fetch(
        "SELECT status, error_kind, error_message, created_at FROM executions WHERE backfill = $1",
        uuid.UUID(slow["id"]),
    )
    assert len(slow_rows) == cancelled["created"]
    assert max(r["created_at"] for r in slow_rows) <= ended
    assert {
        (r["error_kind"], r["error_message"]) for r in slow_rows if r["status"] == "cancelled"
    } == {("cancelled", "backfill cancelled")}
    assert not [r for r in slow_rows if r["status"] == "scheduled"]
    later = await get(slow["id"], hb)
    assert later["created"] == cancelled["created"]
    assert later["cancelled"] == sum(1 for r in slow_rows if r["status"] == "cancelled") > 0

    # The CLI shows the same counts; the executions say which backfill ran them.
    cli = horae("backfills", "get", slow["id"], "-o", "json", db_url=db_url)
    assert cli.returncode == 0, cli.stderr
    shown = json.loads(cli.stdout)
    assert {k: shown[k] for k in ("state", "total", "created", "cancelled")} == {
        "state": "cancelled", "total": 720, "created": later["created"],
        "cancelled": later["cancelled"],
    }  # fmt: skip
    page = (
        await api.get(f"/jobs/{fast_job}/executions?limit=5&status=succeeded", headers=h)
    ).json()
    assert {e["backfill"] for e in page["items"]} == {fast["id"]}
    cli = horae("executions", slow_job, "--status", "cancelled", "--limit", "3", "-o", "json",
                db_url=db_url)  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert [e["error"] for e in json.loads(cli.stdout)] == [
        {"kind": "cancelled", "message": "backfill cancelled"}
    ] * 3
    assert {e["backfill"] for e in json.loads(cli.stdout)} == {slow["id"]}
    listed = (await api.get(f"/jobs/{fast_job}/backfills", headers=h)).json()["items"]
    assert [b["id"] for b in listed] == [fast["id"]]


async def test_bad_backfills_are_refused_naming_the_field(
    api: httpx.AsyncClient, tenants: Tenants
) -> None:
    h = bearer(tenants.alice)
    job = (await api.post("/jobs", json=HOURLY, headers=h)).json()["id"]
    now = datetime.now(UTC)
    day = timedelta(days=1)
    cases = {
        "to": {"from": (now - day).isoformat(), "to": (now - 2 * day).isoformat()},
        "from": {"from": "yesterday", "to": now.isoformat()},
        "rate": {**last_30_days(), "rate": 1001},
        "overlap": {**last_30_days(), "overlap": "Replace"},
    }
    future = {"from": (now - day).isoformat(), "to": (now + day).isoformat()}
    for field, body in [*cases.items(), ("to", future)]:
        r = await api.post(f"/jobs/{job}:backfill", json=body, headers=h)
        assert r.status_code == 422, (field, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert field in [e["field"].split(".")[-1] for e in r.json()["errors"]], (field, r.text)
    assert "in the future" in r.json()["detail"]

    # More than a million occurrences (12 days of every second).
    second = (await api.post("/jobs", json={"task": "t", "cron": "* * * * * *"}, headers=h)).json()
    r = await api.post(
        f"/jobs/{second['id']}:backfill",
        json={"from": (now - 12 * day).isoformat(), "to": now.isoformat()},
        headers=h,
    )
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "to", r.text
    assert "more than 1,000,000 occurrences" in r.json()["detail"]

    one_off = {"task": "t", "run_at": (now + day).isoformat()}
    once = (await api.post("/jobs", json=one_off, headers=h)).json()["id"]
    r = await api.post(f"/jobs/{once}:backfill", json=last_30_days(), headers=h)
    assert r.status_code == 409 and "one-off" in r.json()["detail"], r.text
    r = await api.post(f"/jobs/{job}:backfill", json=last_30_days(), headers=bearer(tenants.bob))
    assert r.status_code == 404
    r = await api.post(f"/jobs/{job}:backfill", json=last_30_days(), headers=bearer(tenants.reader))
    assert r.status_code == 403


def test_bad_backfill_options_are_one_line_and_exit_code_2() -> None:
    job = str(uuid.uuid4())
    now = datetime.now(UTC)
    past, earlier = (now - timedelta(days=1)).isoformat(), (now - timedelta(days=2)).isoformat()
    cases = {
        ("--from", past, "--to", earlier): "horae: --to: to (",
        ("--from", past, "--to", (now + timedelta(days=1)).isoformat()): "horae: --to: ",
        ("--from", "yesterday", "--to", past): "horae: --from: not an ISO 8601 instant",
        ("--from", earlier, "--to", past, "--rate", "0"): "horae: --rate: rate must be 1 to 1000",
        ("--from", earlier, "--to", past, "--overlap", "Replace"): "horae: --overlap must be",
    }
    for args, start in cases.items():
        r = horae("jobs", "backfill", job, *args)
        assert r.returncode == 2, (args, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(start), (args, r.stderr)
    r = horae("backfills", "get", "not-an-id")
    assert r.returncode == 2 and r.stderr.startswith("horae: BACKFILL must be a backfill id")

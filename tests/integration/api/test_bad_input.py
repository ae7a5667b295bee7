"""Every rejection names the field, is application/problem+json, and writes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from tests.integration.api.conftest import Tenants, bearer

SOON = (datetime.now(UTC) + timedelta(hours=1)).isoformat()


async def assert_problem(r: httpx.Response, status: int, field: str | None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["status"] == status and body["title"] and body["detail"]
    if field is not None:
        assert field in [e["field"] for e in body["errors"]], body
        assert body["detail"].startswith(field), body
    return body


BAD_JOBS = [
    ({"task": "t", "cron": "61 * * * *"}, "cron"),
    ({"task": "t", "cron": "* * *"}, "cron"),
    ({"task": "t", "cron": "0 9 * * *", "time_zone": "Mars/Base"}, "time_zone"),
    ({"task": "t", "run_at": "2030-01-01T09:00:00"}, "run_at"),
    ({"task": "t", "run_at": SOON, "cron": "* * * * *"}, "body"),
    ({"task": "t"}, "body"),
    ({"task": "t", "run_at": "2020-01-01T00:00:00Z"}, "run_at"),
    ({"task": "t", "cron": "* * * * *", "payload": [1, 2]}, "payload"),
    ({"task": "t", "cron": "* * * * *", "payload": "text"}, "payload"),
    ({"task": "t", "cron": "* * * * *", "retry": {"max_attempts": 0}}, "retry.max_attempts"),
    ({"task": "t", "cron": "* * * * *", "retry": {"initial_interval_seconds": -1}},
     "retry.initial_interval_seconds"),
    ({"task": "t", "cron": "* * * * *", "colour": "blue"}, "colour"),
    ({"task": "Bad Name", "cron": "* * * * *"}, "task"),
    ({"task": "t", "cron": "* * * * *", "jitter_seconds": 99999}, "jitter_seconds"),
    ({"task": "t", "cron": "* * * * *", "catch_up": "Some"}, "catch_up"),
    ({"task": "t", "cron": "* * * * *", "catch_up_window_seconds": 0}, "catch_up_window_seconds"),
    ({"task": "t", "cron": "* * * * *", "catch_up_window_seconds": 31 * 86400 + 1},
     "catch_up_window_seconds"),
    ({"task": "t", "cron": "* * * * *", "catch_up_window_seconds": "1h"},
     "catch_up_window_seconds"),
    ({"task": "t", "cron": "* * * * *", "concurrency_policy": "Buffer"}, "concurrency_policy"),
    # Postgres cannot store NUL in text or jsonb: these were 500s (found by the stateful fuzzer).
    ({"task": "t", "cron": "* * * * *", "payload": {"k": ["a\u0000"]}}, "payload"),
    ({"task": "t", "cron": "* * * * *", "payload": {"\u0000": 1}}, "payload"),
    ({"task": "t", "cron": "* * * * *", "name": "a\u0000b"}, "name"),
    # Every string has a size limit.
    ({"task": "t" * 254, "cron": "* * * * *"}, "task"),
    ({"task": "t", "cron": "* * * * *", "name": "n" * 254}, "name"),
    ({"task": "t", "cron": "* " * 101}, "cron"),
    ({"task": "t", "cron": "* * * * *", "time_zone": "Europe/" + "x" * 100_000}, "time_zone"),
    # Instants near the calendar's ends overflowed (jitter on top, or the offset's shift to
    # UTC) into a 500: they are bounded to [1970, 9000).
    ({"task": "t", "run_at": "9999-12-31T23:59:59Z", "jitter_seconds": 3600}, "run_at"),
    ({"task": "t", "run_at": "9999-12-31T23:59:59-05:00"}, "run_at"),
    ({"task": "t", "run_at": "0001-01-01T00:00:00+01:00"}, "run_at"),
    ({"task": "t", "run_at": "9000-01-01T00:00:00Z"}, "run_at"),
    ({"task": "t", "cron": "* * * * *",
      "failure_policy": {"pause_after_consecutive_failures": 0}},
     "failure_policy.pause_after_consecutive_failures"),
    ({"task": "t", "cron": "* * * * *",
      "failure_policy": {"pause_after_consecutive_failures": 1001}},
     "failure_policy.pause_after_consecutive_failures"),
    ({"task": "t", "cron": "* * * * *", "failure_policy": {}},
     "failure_policy.pause_after_consecutive_failures"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "field"), BAD_JOBS, ids=[f for _, f in BAD_JOBS])
async def test_invalid_jobs_are_refused_naming_the_field(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool, body: dict[str, Any], field: str
) -> None:
    r = await api.post("/jobs", json=body, headers=bearer(tenants.alice))
    await assert_problem(r, 422, field)
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0
    assert await pool.fetchval("SELECT count(*) FROM executions") == 0


@pytest.mark.parametrize(
    "body", [b'{"task": "t", "cron": ', b"\xff\xfe{}", b"G%\xc3.\x03\xe2~"], ids=["truncated",
                                                                         "utf16", "binary"],
)  # fmt: skip
async def test_a_body_that_is_not_json_is_a_422_naming_the_body(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool, body: bytes
) -> None:
    # Found by the stateful fuzzer: undecodable bytes were an undocumented 400, and a JSON
    # syntax error named the byte offset as the field.
    headers = {**bearer(tenants.alice), "Content-Type": "application/json"}
    for path in ("/jobs", "/jobs:batch"):
        await assert_problem(await api.post(path, content=body, headers=headers), 422, "body")
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0


async def test_run_at_slightly_past_fires_now(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    past = (datetime.now(UTC) - timedelta(minutes=2)).isoformat()
    r = await api.post("/jobs", json={"task": "t", "run_at": past}, headers=bearer(tenants.alice))
    assert r.status_code == 201
    due = await pool.fetchval("SELECT due_at FROM executions")
    assert due < datetime.now(UTC)


async def test_oversized_payload_is_413(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    body = {"task": "t", "cron": "* * * * *", "payload": {"blob": "x" * (256 * 1024)}}
    r = await api.post("/jobs", json=body, headers=bearer(tenants.alice))
    await assert_problem(r, 413, "payload")
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0


async def test_a_body_over_the_limit_is_413_even_when_streamed_without_a_length(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    # Valid JSON padded with whitespace past 32 MiB: the Content-Length check alone let a
    # chunked upload through, read whole into memory, and create the job.
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"task": "t", "cron": "* * * * *"'
        for _ in range(33):
            yield b" " * (1024 * 1024)
        yield b"}"

    headers = {**bearer(tenants.alice), "Content-Type": "application/json"}
    await assert_problem(await api.post("/jobs", content=chunks(), headers=headers), 413, "body")
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0


async def test_a_batch_over_the_limit_or_with_one_bad_job_writes_nothing(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    good = {"task": "t", "run_at": SOON}
    r = await api.post("/jobs:batch", json={"jobs": [good] * 1001}, headers=bearer(tenants.alice))
    await assert_problem(r, 413, "jobs")
    bad = {"task": "t", "cron": "nope"}
    r = await api.post("/jobs:batch", json={"jobs": [good, good, bad]},
                       headers=bearer(tenants.alice))  # fmt: skip
    await assert_problem(r, 422, "jobs.2.cron")
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0


async def test_malformed_and_unknown_ids(api: httpx.AsyncClient, tenants: Tenants) -> None:
    h = bearer(tenants.alice)
    await assert_problem(await api.get("/jobs/not-a-uuid", headers=h), 422, "job_id")
    await assert_problem(await api.post("/jobs/nope:pause", headers=h), 422, "job_id")
    unknown = "00000000-0000-4000-8000-000000000000"
    await assert_problem(await api.get(f"/jobs/{unknown}", headers=h), 404, None)
    await assert_problem(await api.delete(f"/jobs/{unknown}", headers=h), 404, None)
    await assert_problem(await api.get(f"/executions/{unknown}", headers=h), 404, None)
    await assert_problem(await api.get("/jobs", params={"cursor": "garbage!"}, headers=h),
                         422, "cursor")  # fmt: skip


async def test_patch_with_bad_values_changes_nothing(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    h = bearer(tenants.alice)
    job_id = (await api.post("/jobs", json={"task": "t", "cron": "0 * * * *"}, headers=h)).json()[
        "id"
    ]
    await assert_problem(await api.patch(f"/jobs/{job_id}", json={"cron": "bad"}, headers=h),
                         422, "cron")  # fmt: skip
    await assert_problem(await api.patch(f"/jobs/{job_id}", json={"run_at": SOON}, headers=h),
                         422, "body")  # fmt: skip
    await assert_problem(
        await api.patch(f"/jobs/{job_id}", json={"payload": {"a": "\u0000"}}, headers=h),
        422, "payload",
    )  # fmt: skip
    await assert_problem(await api.patch(f"/jobs/{job_id}", json={"task": None}, headers=h),
                         422, "task")  # fmt: skip
    await assert_problem(await api.patch(f"/jobs/{job_id}", json={"cron": None}, headers=h),
                         422, "body")  # fmt: skip
    await assert_problem(
        await api.patch(f"/jobs/{job_id}", json={"catch_up_window_seconds": -5}, headers=h),
        422, "catch_up_window_seconds",
    )  # fmt: skip
    assert await pool.fetchval("SELECT spec_version FROM jobs") == 1


async def test_preview_rejections(api: httpx.AsyncClient) -> None:
    await assert_problem(await api.post("/schedules:preview", json={"cron": "x"}), 422, "cron")
    await assert_problem(
        await api.post("/schedules:preview", json={"cron": "* * * * *", "count": 101}), 422, "count"
    )


FAR = "9999-12-31T23:59:59Z"


async def test_far_future_instants_are_422_naming_the_field_everywhere(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    # The preview answered 500 without a token; a batch and an edit overflowed the same way.
    preview = "/schedules:preview"
    await assert_problem(
        await api.post(preview, json={"cron": "* * * * *", "after": FAR}), 422, "after"
    )
    await assert_problem(await api.post(preview, json={"run_at": FAR}), 422, "run_at")
    h = bearer(tenants.alice)
    batch = {"jobs": [{"task": "t", "run_at": SOON}, {"task": "t", "run_at": FAR}]}
    await assert_problem(await api.post("/jobs:batch", json=batch, headers=h), 422, "jobs.1.run_at")
    job_id = (await api.post("/jobs", json={"task": "t", "run_at": SOON}, headers=h)).json()["id"]
    await assert_problem(
        await api.patch(f"/jobs/{job_id}", json={"run_at": FAR}, headers=h), 422, "run_at"
    )
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 1
    assert await pool.fetchval("SELECT spec_version FROM jobs") == 1


async def test_a_late_preview_ends_with_the_calendar_instead_of_failing(
    api: httpx.AsyncClient,
) -> None:
    # A yearly schedule asked for 100 times from 8990: the times stop before 9000.
    r = await api.post(
        "/schedules:preview",
        json={
            "cron": "0 0 1 1 *",
            "after": "8990-06-01T00:00:00Z",
            "count": 100,
        },
    )
    assert r.status_code == 200, r.text
    assert [t[:4] for t in r.json()["fire_times"]] == [str(y) for y in range(8991, 9000)]


async def test_a_bad_create_never_fails_another_tenants_create_sent_with_it(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    # Concurrent single creates share a group commit: bob's far-future job made alice's 500.
    good = [
        api.post("/jobs", json={"task": "t", "run_at": SOON}, headers=bearer(tenants.alice))
        for _ in range(20)
    ]
    bad = api.post(
        "/jobs",
        json={"task": "t", "run_at": FAR, "jitter_seconds": 3600},
        headers=bearer(tenants.bob),
    )
    *answers, refused = await asyncio.gather(*good, bad)
    assert [r.status_code for r in answers] == [201] * 20, [r.text for r in answers]
    await assert_problem(refused, 422, "run_at")
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE tenant = $1", tenants.a) == 20


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"reason": "r" * 501}, "reason"),
        ({"reason": "on\u0000hold"}, "reason"),
        ({"reason": ""}, "reason"),
        ({"reason": "ok", "until": "never"}, "until"),
    ],
)
async def test_a_pause_with_a_bad_reason_is_refused_and_leaves_the_job_active(
    api: httpx.AsyncClient, tenants: Tenants, body: dict[str, Any], field: str
) -> None:
    h = bearer(tenants.alice)
    job_id = (await api.post("/jobs", json={"task": "t", "cron": "0 * * * *"}, headers=h)).json()[
        "id"
    ]
    await assert_problem(await api.post(f"/jobs/{job_id}:pause", json=body, headers=h), 422, field)
    assert (await api.get(f"/jobs/{job_id}", headers=h)).json()["state"] == "active"

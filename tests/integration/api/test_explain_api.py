"""`GET /jobs/{id}/explain` through the HTTP API: the answer's fields for an occurrence of a
job, a problem naming `at` for an instant it cannot read, 404 for another tenant's job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx

from tests.integration.api.conftest import Tenants, bearer


async def test_explain_answers_a_verdict_steps_and_the_nearest_fire_times(
    api: httpx.AsyncClient, tenants: Tenants
) -> None:
    h = bearer(tenants.alice)
    created = await api.post("/jobs", json={"task": "report", "cron": "0 * * * *"}, headers=h)
    job_id = created.json()["id"]

    latest = await api.get(f"/jobs/{job_id}/explain", headers=h)
    assert latest.status_code == 200, latest.text
    body = latest.json()
    # Created just now: its most recent occurrence at or before now is none; its next is shown.
    assert (body["job_id"], body["outcome"]) == (job_id, "not_due_yet")
    assert body["occurrence_at"] == body["at"]
    assert datetime.fromisoformat(body["at"]) > datetime.now(UTC)
    assert [s["what"] for s in body["steps"]] == ["due"]

    hour = (datetime.now(UTC) + timedelta(hours=5)).replace(minute=0, second=0, microsecond=0)
    between = (hour + timedelta(minutes=30)).isoformat()
    off = await api.get(f"/jobs/{job_id}/explain", params={"at": between}, headers=h)
    assert off.status_code == 200
    assert (off.json()["outcome"], off.json()["occurrence_at"]) == ("not_a_fire_time", None)
    assert datetime.fromisoformat(off.json()["fire_time_before"]) == hour
    assert datetime.fromisoformat(off.json()["fire_time_after"]) == hour + timedelta(hours=1)

    before = (hour - timedelta(days=2)).isoformat()
    early = (await api.get(f"/jobs/{job_id}/explain", params={"at": before}, headers=h)).json()
    assert (early["outcome"], early["reason"]) == ("no_row", "before_created")


async def test_explain_refuses_an_unreadable_instant_and_hides_other_tenants_jobs(
    api: httpx.AsyncClient, tenants: Tenants
) -> None:
    h = bearer(tenants.alice)
    job_id = (await api.post("/jobs", json={"task": "t", "cron": "* * * * *"}, headers=h)).json()
    for at in ("yesterday", "2026-12-02T10:00:00", "2026-13-02T10:00:00Z"):
        bad = await api.get(f"/jobs/{job_id['id']}/explain", params={"at": at}, headers=h)
        assert bad.status_code == 422, at
        assert bad.headers["content-type"] == "application/problem+json"
        assert bad.json()["errors"][0]["field"] == "at", bad.json()
    other = await api.get(f"/jobs/{job_id['id']}/explain", headers=bearer(tenants.bob))
    assert other.status_code == 404
    assert other.headers["content-type"] == "application/problem+json"

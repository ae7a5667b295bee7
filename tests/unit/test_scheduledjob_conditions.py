"""What a ScheduledJob's conditions and status say of a paused job: paused by a user (with
or without a reason), or by its failure policy."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from horae.models import CatchUpPolicy, ConcurrencyPolicy, JobSource, JobState
from horae.operator.scheduledjob import conditions_of, status_of
from horae.store.rows import JobRow

AT = datetime(2030, 1, 1, tzinfo=UTC)


def job(**changes: Any) -> JobRow:
    fields: dict[str, Any] = dict(
        id=uuid.uuid4(), tenant="ns", name="nightly", source=JobSource.CRD, task="t",
        payload={}, run_at=None, cron="0 9 * * *", time_zone="UTC", jitter_seconds=0,
        retry_policy={}, timeout_seconds=None, concurrency_policy=ConcurrencyPolicy.ALLOW,
        starting_deadline_seconds=None, catch_up=CatchUpPolicy.SKIP, state=JobState.ACTIVE,
        paused_at=None, spec_version=1, shard=0, next_run_at=None, last_run_at=None,
        last_status=None, idempotency_key=None, request_hash=None, created_at=AT,
        updated_at=AT, fires_per_minute=0.0, manual_trigger=None, pause_after_failures=2,
        consecutive_failures=0, paused_reason=None, paused_for_failures=False,
        catch_up_window_seconds=None,
    )  # fmt: skip
    return JobRow(**{**fields, **changes})


def by_type(row: JobRow) -> dict[str, tuple[bool, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in conditions_of(row)}


def test_a_job_its_failure_policy_paused_is_not_ready_and_both_conditions_say_why() -> None:
    why = "paused after 2 consecutive failures (last: execution x failed: boom)"
    row = job(state=JobState.PAUSED, paused_at=AT, paused_reason=why, paused_for_failures=True,
              consecutive_failures=2)  # fmt: skip
    found = by_type(row)
    hint = f"{why}; set spec.suspend to true, then to false, to resume it"
    assert found["Ready"] == (False, "TooManyFailures", hint)
    assert found["Suspended"] == (True, "TooManyFailures", hint)
    status = status_of(row, None, None)
    assert (status["pausedReason"], status["consecutiveFailures"]) == (why, 2)


def test_a_user_pause_shows_its_reason_and_an_active_job_none() -> None:
    paused = job(state=JobState.PAUSED, paused_at=AT, paused_reason="INC-9")
    assert by_type(paused)["Ready"] == (True, "Stored", "job stored")
    assert by_type(paused)["Suspended"] == (True, "Suspend", "INC-9")
    assert by_type(job())["Suspended"] == (False, "Active", "")
    assert status_of(job(), None, None)["pausedReason"] is None

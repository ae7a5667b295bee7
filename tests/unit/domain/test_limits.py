"""The rules every entry point applies: payload size, lateness, and bounds the CRD and
the models read from one place."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic
import pytest

from horae.crd_schemas import scheduledjob_schema
from horae.domain.limits import (
    DEFAULT_MAX_LATENESS,
    MAX_PAYLOAD_BYTES,
    MAX_RESULT_BYTES,
    PAUSE_REASON_MAX_CHARS,
    RESULT_DROPPED_KEY,
    RETRY_LIMITS,
    lateness_error,
    pause_reason_error,
    payload_size_error,
    stored_result,
)
from horae.models import RetryPolicy
from horae.resources import ScheduledJobSpec

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)


def payload_of(size: int) -> dict[str, Any]:
    """A payload of exactly `size` bytes serialized compactly."""
    overhead = len(json.dumps({"b": ""}, separators=(",", ":")))
    return {"b": "x" * (size - overhead)}


def test_a_payload_of_exactly_the_limit_is_stored_and_one_byte_more_is_not() -> None:
    assert payload_size_error(payload_of(MAX_PAYLOAD_BYTES)) is None
    error = payload_size_error(payload_of(MAX_PAYLOAD_BYTES + 1))
    assert error == f"payload is {MAX_PAYLOAD_BYTES + 1} bytes; the limit is 262144"


def test_a_payload_nested_past_recursion_is_refused_rather_than_crashing() -> None:
    deep: dict[str, Any] = {}
    for _ in range(100_000):
        deep = {"a": deep}
    assert payload_size_error(deep) == "payload is nested too deeply to store"


def test_a_run_at_within_the_default_lateness_fires_and_one_past_it_is_refused() -> None:
    at_limit = NOW - DEFAULT_MAX_LATENESS
    assert lateness_error(at_limit, starting_deadline_seconds=None, now=NOW) is None
    error = lateness_error(at_limit - timedelta(seconds=1), starting_deadline_seconds=None, now=NOW)
    assert error == "is more than 3600s in the past (past its starting deadline)"


def test_a_starting_deadline_replaces_the_default_lateness() -> None:
    ten_minutes_ago = NOW - timedelta(minutes=10)
    assert lateness_error(ten_minutes_ago, starting_deadline_seconds=60, now=NOW) == (
        "is more than 60s in the past (past its starting deadline)"
    )
    two_hours_ago = NOW - timedelta(hours=2)
    assert lateness_error(two_hours_ago, starting_deadline_seconds=3 * 3600, now=NOW) is None


def test_a_cron_job_has_no_lateness() -> None:
    assert lateness_error(None, starting_deadline_seconds=None, now=NOW) is None


def test_the_retry_bounds_of_the_crd_are_the_retry_policys() -> None:
    retry = scheduledjob_schema()["properties"]["spec"]["properties"]["retryPolicy"]
    bounds = retry["properties"]
    assert bounds["maxAttempts"]["maximum"] == RETRY_LIMITS.max_attempts
    assert bounds["initialIntervalSeconds"]["maximum"] == RETRY_LIMITS.initial_interval_seconds
    assert bounds["maxIntervalSeconds"]["maximum"] == RETRY_LIMITS.max_interval_seconds
    RetryPolicy(max_attempts=RETRY_LIMITS.max_attempts)
    with pytest.raises(pydantic.ValidationError):
        RetryPolicy(max_attempts=RETRY_LIMITS.max_attempts + 1)
    with pytest.raises(pydantic.ValidationError):
        RetryPolicy(initial_interval_seconds=RETRY_LIMITS.initial_interval_seconds + 1)
    with pytest.raises(pydantic.ValidationError):
        RetryPolicy(max_interval_seconds=RETRY_LIMITS.max_interval_seconds + 1)


def test_a_scheduledjobs_retry_policy_has_the_retry_policys_bounds_and_defaults() -> None:
    assert ScheduledJobSpec(task="t").retry_policy.model_dump() == RetryPolicy().model_dump()
    with pytest.raises(pydantic.ValidationError) as info:
        ScheduledJobSpec.model_validate(
            {"task": "t", "retryPolicy": {"maxAttempts": RETRY_LIMITS.max_attempts + 1}}
        )
    assert [e["loc"] for e in info.value.errors()] == [("retryPolicy", "maxAttempts")]


def test_a_scheduledjobs_payload_over_the_limit_is_refused_naming_the_payload() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        ScheduledJobSpec.model_validate(
            {"task": "t", "schedule": "* * * * *", "payload": payload_of(MAX_PAYLOAD_BYTES + 1)}
        )
    [error] = info.value.errors()
    assert error["loc"] == ("payload",) and "the limit is 262144" in error["msg"]


def test_a_result_of_exactly_the_limit_is_stored_and_one_byte_more_is_a_marker() -> None:
    assert stored_result(payload_of(MAX_RESULT_BYTES)) == payload_of(MAX_RESULT_BYTES)
    assert stored_result(payload_of(MAX_RESULT_BYTES + 1)) == {
        RESULT_DROPPED_KEY: f"result is {MAX_RESULT_BYTES + 1} bytes of JSON; the limit is"
        f" {MAX_RESULT_BYTES}"
    }


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ({1, 2}, "result is not JSON-serialisable (TypeError: Object of type set"),
        (float("nan"), "result is not JSON-serialisable (ValueError: Out of range float"),
        ({"k": "a\x00b"}, "result contains the NUL character"),
    ],
)
def test_a_result_json_or_postgres_cannot_hold_is_a_marker_saying_why(value: Any, why: str) -> None:
    [(key, message)] = stored_result(value).items()
    assert key == RESULT_DROPPED_KEY and message.startswith(why)


def test_no_result_is_stored_as_none_and_tuples_as_lists() -> None:
    assert stored_result(None) is None
    assert stored_result({"pair": (1, 2), 3: "x"}) == {"pair": [1, 2], "3": "x"}


def test_a_pause_reason_is_bounded_and_may_not_hold_nul() -> None:
    assert pause_reason_error("r" * PAUSE_REASON_MAX_CHARS) is None
    assert pause_reason_error("r" * (PAUSE_REASON_MAX_CHARS + 1)) == (
        f"is {PAUSE_REASON_MAX_CHARS + 1} characters; the limit is {PAUSE_REASON_MAX_CHARS}"
    )
    assert pause_reason_error("a\x00b") == "cannot contain the NUL character (\\u0000)"

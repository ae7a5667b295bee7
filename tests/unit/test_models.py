from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pydantic
import pytest

from horae.models import ExecutionStatus, JobSpec, RetryPolicy, shard_of


def error_fields(exc: pydantic.ValidationError) -> list[str]:
    return [".".join(str(p) for p in e["loc"]) or "<model>" for e in exc.errors()]


def test_a_job_needs_exactly_one_of_run_at_and_cron() -> None:
    with pytest.raises(pydantic.ValidationError, match="exactly one of run_at and cron"):
        JobSpec(task="t")
    with pytest.raises(pydantic.ValidationError, match="exactly one of run_at and cron"):
        JobSpec(task="t", cron="* * * * *", run_at=datetime(2030, 1, 1, tzinfo=UTC))


def test_run_at_without_offset_is_refused_naming_the_field() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        JobSpec(task="t", run_at=datetime(2030, 1, 1))
    assert error_fields(info.value) == ["run_at"]
    assert "UTC offset" in str(info.value)


def test_run_at_is_normalised_to_utc() -> None:
    spec = JobSpec.model_validate({"task": "t", "run_at": "2030-01-01T10:00:00+02:00"})
    assert spec.run_at == datetime(2030, 1, 1, 8, tzinfo=UTC)
    assert spec.run_at is not None and spec.run_at.utcoffset() == timedelta(0)


def test_unknown_time_zone_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        JobSpec(task="t", cron="0 9 * * *", time_zone="Mars/Olympus")
    assert error_fields(info.value) == ["time_zone"]


def test_invalid_cron_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        JobSpec(task="t", cron="61 * * * *")
    assert error_fields(info.value) == ["cron"]


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        JobSpec.model_validate({"task": "t", "cron": "* * * * *", "colour": "blue"})
    assert error_fields(info.value) == ["colour"]


@pytest.mark.parametrize("name", ["", "Upper", "-lead", "trail-", "sp ace"])
def test_task_names_are_dns_like(name: str) -> None:
    with pytest.raises(pydantic.ValidationError):
        JobSpec(task=name, cron="* * * * *")


def test_retry_backoff_doubles_up_to_the_cap() -> None:
    policy = RetryPolicy(initial_interval_seconds=1, max_interval_seconds=5)
    caps = [policy.backoff_cap(n).total_seconds() for n in range(1, 6)]
    assert caps == [1, 2, 4, 5, 5]


def test_retry_delay_is_full_jitter_within_the_cap() -> None:
    policy = RetryPolicy(initial_interval_seconds=2, max_interval_seconds=60)
    assert policy.delay(3, rand=lambda lo, hi: hi) == timedelta(seconds=8)
    assert policy.delay(3, rand=lambda lo, hi: lo) == timedelta(0)


def test_retry_policy_bounds() -> None:
    with pytest.raises(pydantic.ValidationError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(pydantic.ValidationError, match="max_interval_seconds"):
        RetryPolicy(initial_interval_seconds=10, max_interval_seconds=1)


def test_terminal_statuses() -> None:
    live = {s for s in ExecutionStatus if not s.terminal}
    assert live == {ExecutionStatus.SCHEDULED, ExecutionStatus.QUEUED, ExecutionStatus.RUNNING}


def test_shard_is_stable_and_in_range() -> None:
    import uuid

    job = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert shard_of(job, 64) == shard_of(job, 64) == job.int % 64
    assert all(0 <= shard_of(uuid.uuid4(), 64) < 64 for _ in range(200))


def test_a_payload_or_key_holding_nul_is_refused_as_postgres_cannot_store_it() -> None:
    for payload in ({"a": "x\x00"}, {"\x00": 1}, {"a": [{"b": ["\x00"]}]}):
        with pytest.raises(pydantic.ValidationError, match="NUL"):
            JobSpec(task="t", cron="* * * * *", payload=payload)
    JobSpec(task="t", cron="* * * * *", payload={"a": "\\u0000 as text is fine"})

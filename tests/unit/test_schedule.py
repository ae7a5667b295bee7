from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise

import pytest

from horae.schedule import cron_times, jitter_offset, next_fire_times, validate_cron


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_five_field_cron_fires_on_the_minute() -> None:
    times = next_fire_times(
        run_at=None, cron="*/15 * * * *", time_zone="UTC", after=utc(2026, 1, 1, 0, 7), count=3
    )
    assert times == [utc(2026, 1, 1, 0, 15), utc(2026, 1, 1, 0, 30), utc(2026, 1, 1, 0, 45)]


def test_six_field_cron_has_seconds_first() -> None:
    times = list(islice(cron_times("*/5 * * * * *", "UTC", utc(2026, 1, 1)), 3))
    assert times == [utc(2026, 1, 1, 0, 0, 5), utc(2026, 1, 1, 0, 0, 10), utc(2026, 1, 1, 0, 0, 15)]


def test_macros_expand() -> None:
    assert next(cron_times("@daily", "UTC", utc(2026, 3, 1, 12))) == utc(2026, 3, 2)
    assert next(cron_times("@hourly", "UTC", utc(2026, 3, 1, 12, 1))) == utc(2026, 3, 1, 13)


def test_cron_is_evaluated_in_the_job_time_zone() -> None:
    fire = next(cron_times("0 9 * * *", "Europe/Paris", utc(2026, 7, 1)))
    assert fire == utc(2026, 7, 1, 7)  # 09:00 CEST


def test_fixed_time_job_runs_once_when_fall_back_repeats_the_hour() -> None:
    # America/New_York falls back at 02:00 EDT on 2026-11-01: 01:30 happens twice.
    times = list(islice(cron_times("30 1 * * *", "America/New_York", utc(2026, 10, 31, 12)), 2))
    assert times == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]


def test_fixed_time_job_skipped_by_spring_forward_runs_right_after_the_jump() -> None:
    # 2026-03-08 02:30 does not exist in New York; Debian cron runs it at 03:00 EDT.
    fire = next(cron_times("30 2 * * *", "America/New_York", utc(2026, 3, 8, 5)))
    assert fire == utc(2026, 3, 8, 7)


def test_fire_times_strictly_increase() -> None:
    times = list(
        islice(cron_times("*/7 * * * * *", "Australia/Lord_Howe", utc(2026, 4, 4, 14)), 2000)
    )
    assert all(a < b for a, b in pairwise(times))


def test_one_off_has_a_single_fire_time_only_in_the_future() -> None:
    at = utc(2030, 1, 1)
    assert next_fire_times(
        run_at=at, cron=None, time_zone="UTC", after=utc(2029, 1, 1), count=5
    ) == [at]
    assert next_fire_times(run_at=at, cron=None, time_zone="UTC", after=at, count=5) == []


@pytest.mark.parametrize("expr", ["* * * *", "60 * * * *", "* * * * * * *", "bogus"])
def test_invalid_cron_expressions_are_explained(expr: str) -> None:
    with pytest.raises(ValueError, match="cron"):
        validate_cron(expr)


def test_jitter_is_stable_per_job_and_within_bounds() -> None:
    job = uuid.uuid4()
    assert jitter_offset(job, 30) == jitter_offset(job, 30)
    offsets = {jitter_offset(uuid.uuid4(), 30) for _ in range(500)}
    assert all(timedelta(0) <= o < timedelta(seconds=30) for o in offsets)
    assert len(offsets) > 100  # spread, not one value
    assert jitter_offset(job, 0) == timedelta(0)

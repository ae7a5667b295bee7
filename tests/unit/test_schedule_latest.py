"""`latest_fire_times`: the latest fire times before an instant, found without walking the
whole stretch since `after` (a resume's catch-up after a long pause)."""

from __future__ import annotations

import functools
import time
from datetime import UTC, datetime, timedelta

import pytest

from horae.schedule import cron_times, fires_per_minute, latest_fire_times


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@functools.cache
def walked(expr: str, tz: str, after: datetime, until: datetime) -> list[datetime]:
    """Every fire time in (after, until], the slow way."""
    fires = []
    for fire in cron_times(expr, tz, after):
        if fire > until:
            break
        fires.append(fire)
    return fires


def test_the_latest_seconds_before_an_instant_are_the_seconds_just_before_it() -> None:
    until = utc(2026, 5, 1, 12, 0, 0)
    got = latest_fire_times(
        "* * * * * *", "UTC", after=until - timedelta(days=365), until=until, count=3
    )
    assert got == [until - timedelta(seconds=2), until - timedelta(seconds=1), until]


def test_a_year_of_every_second_costs_no_more_than_an_hour() -> None:
    until = utc(2026, 5, 1, 12, 0, 0, 500_000)
    started = time.monotonic()
    got = latest_fire_times(
        "* * * * * *", "Europe/Paris", after=until - timedelta(days=365), until=until, count=101
    )
    assert time.monotonic() - started < 1.0
    assert len(got) == 101 and got[-1] == utc(2026, 5, 1, 12, 0, 0)
    assert got[0] == utc(2026, 5, 1, 11, 58, 20)


def test_fewer_fire_times_than_asked_are_all_returned() -> None:
    got = latest_fire_times(
        "0 * * * *", "UTC", after=utc(2026, 1, 1, 9, 30), until=utc(2026, 1, 1, 12, 30), count=100
    )
    assert got == [utc(2026, 1, 1, 10), utc(2026, 1, 1, 11), utc(2026, 1, 1, 12)]


def test_none_when_nothing_fired_or_nothing_was_asked() -> None:
    assert (
        latest_fire_times("0 0 1 1 *", "UTC", after=utc(2026, 1, 2), until=utc(2026, 6, 1), count=5)
        == []
    )
    assert (
        latest_fire_times("* * * * *", "UTC", after=utc(2026, 1, 2), until=utc(2026, 6, 1), count=0)
        == []
    )
    assert (
        latest_fire_times("* * * * *", "UTC", after=utc(2026, 1, 2), until=utc(2026, 1, 1), count=5)
        == []
    )


@pytest.mark.parametrize(
    ("expr", "tz"),
    [
        ("30 2 * * *", "Europe/Paris"),  # skipped by spring-forward: runs at the jump
        ("30 1 * * *", "America/New_York"),  # repeated by fall-back: runs once
        ("*/7 * * * *", "America/New_York"),  # real time across both changes
        ("*/10 * * * *", "Australia/Lord_Howe"),  # a half-hour shift
        ("0 0 L * *", "Europe/Berlin"),
        ("0 9 * * 1#2", "Asia/Kolkata"),
        ("0 0 29 2 *", "UTC"),
    ],
)
@pytest.mark.parametrize(
    "until",
    [
        utc(2025, 3, 30, 1, 30),  # Europe's spring-forward
        utc(2025, 10, 26, 1, 10),  # Europe's fall-back
        utc(2024, 11, 3, 6, 5),  # America's fall-back
        utc(2025, 4, 5, 15, 20),  # Lord Howe's fall-back (half an hour)
    ],
)
@pytest.mark.parametrize("count", [1, 3, 10])
def test_the_latest_fire_times_are_the_tail_of_the_forward_walk(
    expr: str, tz: str, until: datetime, count: int
) -> None:
    after = until - timedelta(days=20 if expr.startswith("*") else 800)
    assert (
        latest_fire_times(expr, tz, after=after, until=until, count=count)
        == walked(expr, tz, after, until)[-count:]
    )


@pytest.mark.parametrize(
    ("cron", "rate"),
    [
        ("* * * * * *", 60.0),
        ("*/5 * * * * *", 12.0),
        ("*/5 * * * *", 0.2),
        ("@daily", 1 / 1440),
        ("0,1 0 * * *", 1.0),  # daily, but twice a minute apart: its densest counts
        (None, 1.0),  # a one-off
    ],
)
def test_a_jobs_fire_rate_is_sixty_seconds_over_its_shortest_gap(
    cron: str | None, rate: float
) -> None:
    assert fires_per_minute(cron, "Europe/Paris") == pytest.approx(rate)

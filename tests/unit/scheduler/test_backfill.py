"""The backfill feeder's rate: a token bucket of at most one second's worth."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from horae.scheduler.backfill import owed

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def test_a_backfill_is_owed_its_rate_times_the_time_since_it_was_last_fed() -> None:
    assert owed(100, T0, T0 + timedelta(milliseconds=250)) == (25, T0 + timedelta(seconds=0.25))


def test_an_idle_backfill_is_owed_one_seconds_worth_at_most() -> None:
    n, fed_at = owed(100, T0, T0 + timedelta(minutes=5))
    assert n == 100 and fed_at == T0 + timedelta(minutes=5)


def test_the_fraction_of_an_occurrence_not_owed_yet_is_kept_for_the_next_round() -> None:
    n, fed_at = owed(3, T0, T0 + timedelta(milliseconds=500))
    assert n == 1 and fed_at == T0 + timedelta(seconds=1 / 3)
    assert owed(3, fed_at, T0 + timedelta(milliseconds=600))[0] == 0


def test_nothing_is_owed_before_the_clock_reaches_fed_at() -> None:
    assert owed(10, T0, T0 - timedelta(seconds=1)) == (0, T0)

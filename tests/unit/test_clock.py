"""How a process reckons Postgres's clock from its measurements (`horae.clock`): the tightest
recent one wins, a slow one cannot drag the offset off, a stepped clock is followed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from horae.clock import KEPT_FOR, DatabaseClock, Reading

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def reading(at: float, their_offset: float, took: float, answered_after: float) -> Reading:
    """Asked at `at` s past T0 (ours), their clock `their_offset` s ahead of ours, read
    `answered_after` s into a round trip of `took` s."""
    before = T0 + timedelta(seconds=at)
    theirs = before + timedelta(seconds=answered_after + their_offset)
    return Reading(before, theirs, before + timedelta(seconds=took))


def ms(offset: timedelta) -> float:
    return round(offset.total_seconds() * 1000, 3)


def test_one_measurement_gives_the_midpoint_of_its_round_trip() -> None:
    clock = DatabaseClock()
    clock.read(reading(0, their_offset=0.25, took=0.002, answered_after=0.001))
    assert ms(clock.offset) == 250.0


def test_a_slow_round_trip_does_not_drag_the_offset_off_a_tight_one() -> None:
    clock = DatabaseClock()
    clock.read(reading(0, their_offset=0, took=0.001, answered_after=0.0005))
    # Postgres answered at once, and the answer waited 0.6 s for a busy loop: the midpoint
    # alone says Postgres is 0.3 s behind, and a handler held to its clock starts 0.3 s late.
    slow = reading(10, their_offset=0, took=0.6, answered_after=0.0)
    assert ms(slow.theirs - (slow.before + slow.round_trip / 2)) == -300.0
    clock.read(slow)
    assert ms(clock.offset) == 0.0


def test_the_newest_measurement_bounds_the_offset() -> None:
    clock = DatabaseClock()
    clock.read(reading(0, their_offset=0, took=0.1, answered_after=0.05))  # bounds ±50 ms
    # Agrees with the first (bounds 10-300 ms), whose midpoint (0) it rules out: the nearest
    # it allows.
    clock.read(reading(10, their_offset=0.3, took=0.29, answered_after=0.0))
    assert ms(clock.offset) == 10.0


def test_measurements_older_than_they_are_kept_for_no_longer_count() -> None:
    clock = DatabaseClock()
    clock.read(reading(0, their_offset=0, took=0.001, answered_after=0.0005))
    later = KEPT_FOR.total_seconds() + 1
    clock.read(reading(later, their_offset=0, took=0.2, answered_after=0.05))
    assert ms(clock.offset) == -50.0  # its own midpoint: the tight one is gone


def test_a_stepped_clock_is_followed_at_once() -> None:
    clock = DatabaseClock()
    clock.read(reading(0, their_offset=0, took=0.001, answered_after=0.0005))
    # Our clock stepped 5 s ahead: Postgres is now 5 s behind us, whatever the tight
    # measurement before said (the two cannot both be right).
    clock.read(reading(10, their_offset=-5, took=0.01, answered_after=0.005))
    assert ms(clock.offset) == -5000.0
    # ...and the earlier one is forgotten, not chosen again once this one is the slower.
    clock.read(reading(20, their_offset=-5, took=0.02, answered_after=0.01))
    assert ms(clock.offset) == -5000.0

"""When a worker's own record of its promises lets it start an execution it claimed ahead
without asking the store (`reached_in_time`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from horae.worker.promises import reached_in_time

T = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
GRACE = timedelta(seconds=1.5)


def at(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


# Promises every 0.2 s, each reaching 0.5 s ahead of when it was written.
STEADY = [(at(t / 10 + 0.5), at(t / 10)) for t in range(0, 20, 2)]


def test_a_due_time_a_promise_written_ahead_reached_is_covered() -> None:
    assert reached_in_time(STEADY, at(1.0), GRACE)
    assert reached_in_time(STEADY, at(0.5), GRACE), "reached exactly"


def test_a_due_time_no_promise_has_reached_yet_is_not() -> None:
    assert not reached_in_time(STEADY, at(2.5), GRACE)
    assert not reached_in_time([], at(1.0), GRACE)


def test_a_promise_that_reached_it_only_after_the_grace_does_not_cover_it() -> None:
    # Frozen from 0.4 s to 3 s: the first promise reaching 1.0 s was written at 3 s, after
    # the reaper may have given the execution back (1.0 + 1.5 s).
    frozen = [(at(0.9), at(0.4)), (at(3.5), at(3.0))]
    assert not reached_in_time(frozen, at(1.0), GRACE)
    assert reached_in_time(frozen, at(0.9), GRACE)
    # Written within the grace (late, but before a return could come): covered.
    late = [(at(0.9), at(0.4)), (at(2.3), at(1.8))]
    assert reached_in_time(late, at(1.0), GRACE)
    assert not reached_in_time([(at(3.0), at(2.5))], at(1.0), GRACE), "2.5 s is not < 2.5 s"


def test_a_promise_that_reaches_only_its_own_instant_covers_what_fell_due_by_then() -> None:
    # As workers write them: each reaching no further than when it was written, so a
    # handler due at 0.95 s starts on the promise written at 1.0 s, and a worker killed at
    # 1.85 s leaves nothing due after 1.8 s covered.
    written = [(at(t / 10), at(t / 10)) for t in range(0, 20, 2)]
    assert reached_in_time(written, at(1.0), GRACE)
    assert reached_in_time(written, at(0.95), GRACE)
    assert not reached_in_time(written, at(1.85), GRACE)

"""A backfill's total: `count_fire_times` counts what `cron_times` walks, in [start, before),
up to its cap; in UTC by a faster path that must agree with it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import takewhile

import pytest

from horae.domain.backfills import InvalidBackfill, check_range, check_total
from horae.schedule import count_fire_times, cron_times

T0 = datetime(2026, 3, 1, 12, 0, 0, 500_000, tzinfo=UTC)


def walked(expression: str, zone: str, start: datetime, before: datetime) -> int:
    after = start - timedelta(microseconds=1)
    return sum(1 for _ in takewhile(lambda t: t < before, cron_times(expression, zone, after)))


@pytest.mark.parametrize("zone", ["UTC", "Europe/London", "Australia/Lord_Howe"])
@pytest.mark.parametrize(
    "expression", ["0 * * * *", "17 */7 * * * *", "30 1 * * *", "@daily", "0 0 29 2 *"]
)
def test_the_count_is_the_number_of_fire_times_the_schedule_walks(
    expression: str, zone: str
) -> None:
    # Across the March and October daylight-saving changes, from an instant between seconds.
    for start, days in ((T0, 3), (T0 + timedelta(days=25), 10), (T0 + timedelta(days=230), 15)):
        before = start + timedelta(days=days)
        assert count_fire_times(expression, zone, start=start, before=before, cap=10**7) == (
            walked(expression, zone, start, before)
        )


def test_an_occurrence_at_start_counts_and_one_at_before_does_not() -> None:
    top = datetime(2026, 1, 1, tzinfo=UTC)
    assert count_fire_times("0 * * * *", "UTC", start=top, before=top + timedelta(hours=3),
                            cap=100) == 3  # fmt: skip


def test_counting_stops_one_past_the_cap() -> None:
    top = datetime(2026, 1, 1, tzinfo=UTC)
    year = top + timedelta(days=365)
    assert count_fire_times("* * * * *", "UTC", start=top, before=year, cap=1000) == 1001


def test_a_range_must_be_past_ordered_and_hold_between_one_and_a_million_occurrences() -> None:
    now = datetime(2026, 6, 1, tzinfo=UTC)
    with pytest.raises(InvalidBackfill) as backwards:
        check_range(now - timedelta(days=1), now - timedelta(days=2), now)
    with pytest.raises(InvalidBackfill) as future:
        check_range(now - timedelta(days=1), now + timedelta(seconds=1), now)
    with pytest.raises(InvalidBackfill) as empty:
        check_total(0)
    with pytest.raises(InvalidBackfill) as many:
        check_total(1_000_001)
    assert [e.value.field for e in (backwards, future, empty, many)] == ["to", "to", "from", "to"]
    check_range(now - timedelta(days=1), now, now)
    check_total(1_000_000)

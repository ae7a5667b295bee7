"""The range every instant a caller gives lies in, and how Kubernetes objects show one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from horae.domain.instants import EARLIEST_INSTANT, LATEST_INSTANT, check_instant, rfc3339


def test_an_instant_is_kept_in_utc() -> None:
    paris = timezone(timedelta(hours=1))
    assert check_instant(datetime(2030, 1, 1, 10, tzinfo=paris)) == datetime(
        2030, 1, 1, 9, tzinfo=UTC
    )


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (datetime(2030, 1, 1), "needs a UTC offset"),
        (EARLIEST_INSTANT - timedelta(microseconds=1), "must be from 1970-01-01T00:00:00Z"),
        (LATEST_INSTANT, "to before 9000-01-01T00:00:00Z"),
        (datetime.max.replace(tzinfo=timezone(-timedelta(hours=5))), "must be from"),
    ],
)
def test_an_instant_without_offset_or_out_of_range_is_refused(value: datetime, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        check_instant(value)


def test_instants_are_written_in_utc_to_the_second() -> None:
    tokyo = timezone(timedelta(hours=9))
    assert rfc3339(datetime(2030, 1, 1, 9, 30, 15, 999_999, tzinfo=tokyo)) == (
        "2030-01-01T00:30:15Z"
    )
    assert rfc3339(None) is None

"""The range every instant a caller gives lies in, and how Kubernetes objects show one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from horae.domain.instants import (
    EARLIEST_INSTANT,
    LATEST_INSTANT,
    check_instant,
    parse_rfc3339,
    rfc3339,
)


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


def test_rfc3339_instants_are_read_with_their_offset_and_anything_else_refused() -> None:
    assert parse_rfc3339("2026-12-02T10:00:05Z") == datetime(2026, 12, 2, 10, 0, 5, tzinfo=UTC)
    assert parse_rfc3339("2026-12-02 11:00:05.25+01:00") == datetime(
        2026, 12, 2, 10, 0, 5, 250000, tzinfo=UTC
    )
    assert parse_rfc3339("2026-12-02t10:00:05z").tzinfo == UTC
    for text, reason in {
        "2026-12-02T10:00:05": "not an RFC 3339 instant with a UTC offset",
        "2026-12-02": "not an RFC 3339 instant",
        "yesterday": "not an RFC 3339 instant",
        "1765000000": "not an RFC 3339 instant",
        "2026-02-30T10:00:00Z": "not a valid date and time",
        "9999-01-01T00:00:00Z": "must be from 1970-01-01T00:00:00Z",
    }.items():
        with pytest.raises(ValueError, match=reason):
            parse_rfc3339(text)

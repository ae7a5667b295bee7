"""Durations in Go's notation, as manifests and the CLI write them."""

from __future__ import annotations

import pytest

from horae.domain.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("5m", 300), ("1h30m", 5400), ("2h45m10s", 9910), ("744h", 2678400)],
)
def test_durations_read_as_seconds_and_write_back_largest_units_first(
    text: str, seconds: int
) -> None:
    assert parse_duration(text) == seconds
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize("text", ["", "1", "1d", "1.5h", "-5m", "5m1h", "h", "1H"])
def test_anything_else_is_refused_naming_the_notation(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration: write whole hours"):
        parse_duration(text)


def test_format_writes_zero_and_round_units() -> None:
    assert [format_duration(s) for s in (0, 60, 3600, 3661)] == ["0s", "1m", "1h", "1h1m1s"]

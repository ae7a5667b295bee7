"""Execution ids as the tables show them and as the commands read them."""

from __future__ import annotations

import pytest
import typer

from horae.cli.ids import ExecutionRef, short_ids
from tests.support.execution_ids import made_at


def test_runs_seconds_apart_show_apart_though_their_first_8_digits_agree() -> None:
    start = 1_790_000_000_000  # a 3-second cron's runs, all in one minute
    ids = [made_at(start + 3000 * k) for k in range(20)]
    assert len({i.hex[:8] for i in ids}) <= 2  # what the table used to show
    shown = short_ids(ids)
    assert all(shown[i] == i.hex[:12] for i in ids)
    assert len(set(shown.values())) == len(ids)


def test_ids_made_in_the_same_millisecond_show_as_many_digits_as_tell_them_apart() -> None:
    a, b, c = made_at(1_790_000_000_000), made_at(1_790_000_000_000), made_at(1_790_000_000_001)
    shown = short_ids([a, b, c])
    assert shown[a] != shown[b] and len(shown[a]) > 12 and len(shown[b]) > 12
    assert a.hex.startswith(shown[a]) and b.hex.startswith(shown[b])
    assert shown[c] == c.hex[:12]
    assert short_ids([a, a]) == {a: a.hex[:12]}  # one execution in two rows is one id


def test_an_execution_is_read_in_full_as_execution_slash_id_or_by_its_leading_digits() -> None:
    full = made_at(1_790_000_000_000)
    for text in (str(full), f"execution/{full}", full.hex, str(full).upper()):
        ref = ExecutionRef.parse(text)
        assert ref.low == ref.high == full and ref.text == str(full)
    for digits in (full.hex[:8], full.hex[:12], str(full)[:13], full.hex[:31]):
        ref = ExecutionRef.parse(digits)
        assert ref.low <= full <= ref.high
        assert ref.low.hex.startswith(digits.replace("-", "")) and ref.low != ref.high
    ref = ExecutionRef.parse(f"execution/{full.hex[:12]}")
    assert ref.low <= full <= ref.high and ref.text == full.hex[:12]


@pytest.mark.parametrize("text", ["0193abc", "", "execution/", "not-hex-at-all", "0193abcz"])
def test_fewer_than_8_digits_or_other_text_is_refused(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(typer.Exit) as refused:
        ExecutionRef.parse(text)
    assert refused.value.exit_code == 2
    assert capsys.readouterr().err.startswith(
        "horae: EXECUTION must be an execution id or its first 8 or more hex digits"
    )

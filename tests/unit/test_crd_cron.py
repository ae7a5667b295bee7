"""The CRD's per-field cron patterns (checked by CEL at `kubectl apply`) against cronsim,
which the operator and the API validate with: never stricter, and out-of-range refused."""

from __future__ import annotations

import re

from cronsim import CronSimError
from cronsim.cronsim import Field
from hypothesis import given
from hypothesis import strategies as st

from horae.cel import CRON_FIELDS

FIELDS = dict(zip(CRON_FIELDS, Field, strict=True))


def allowed(name: str, text: str) -> bool:
    return re.fullmatch(CRON_FIELDS[name].pattern, text) is not None


def cronsim_accepts(name: str, text: str) -> bool:
    try:
        FIELDS[name].parse(text.upper())
    except (CronSimError, ValueError):
        return False
    return True


ATOMS = st.one_of(
    st.integers(0, 99).map(str),
    st.integers(0, 99).map(lambda n: f"0{n}"),
    st.sampled_from(
        ["*", "L", "LW", "jan", "DEC", "mon", "SAT", "5L", "07L", "17L", "MON#2", "1#06", "1#6"]
    ),
)
ITEMS = st.builds(
    lambda a, b, step: a + (f"-{b}" if b else "") + (f"/{step}" if step is not None else ""),
    ATOMS, st.one_of(st.none(), ATOMS), st.one_of(st.none(), st.integers(0, 70)),
)  # fmt: skip
TERMS = st.lists(ITEMS, min_size=1, max_size=3).map(",".join)


@given(name=st.sampled_from(list(CRON_FIELDS)), text=TERMS)
def test_whatever_cronsim_accepts_the_crd_accepts(name: str, text: str) -> None:
    if cronsim_accepts(name, text):
        assert allowed(name, text), f"{name} {text!r}: cronsim accepts, the CRD refuses"


@given(name=st.sampled_from(list(CRON_FIELDS)), text=TERMS)
def test_the_crd_lets_through_nothing_cronsim_refuses_but_a_backwards_range(
    name: str, text: str
) -> None:
    if allowed(name, text) and not cronsim_accepts(name, text):
        assert "-" in text, f"{name} {text!r}: the CRD lets through what cronsim refuses"


def test_values_out_of_each_fields_range_are_refused() -> None:
    assert [n for n in CRON_FIELDS if allowed(n, "60")] == []
    assert not allowed("hour", "24") and allowed("hour", "23")
    assert not allowed("day-of-month", "0") and allowed("day-of-month", "31")
    assert not allowed("month", "13") and allowed("month", "12")
    assert not allowed("day-of-week", "8") and allowed("day-of-week", "7")
    assert not allowed("minute", "*/0") and allowed("minute", "*/59")

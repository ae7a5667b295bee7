"""How a tenant's limit is shared between store groups (the pure rule)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from horae.scheduler.allowances import targets


def test_a_group_with_all_the_backlog_gets_the_whole_limit() -> None:
    assert targets(4, {"main": 10, "second": 0}) == {"main": 4, "second": 0}
    assert targets(4, {"main": 0, "second": 7}) == {"main": 0, "second": 4}


def test_demand_that_fits_is_met_and_the_rest_spread_evenly() -> None:
    assert targets(10, {"main": 2, "second": 4}) == {"main": 4, "second": 6}
    assert targets(4, {"main": 0, "second": 0}) == {"main": 2, "second": 2}


def test_demand_beyond_the_limit_is_shared_in_proportion_with_one_each_at_least() -> None:
    assert targets(10, {"main": 30, "second": 10}) == {"main": 7, "second": 3}
    assert targets(4, {"main": 1000, "second": 1}) == {"main": 3, "second": 1}


@given(
    st.integers(min_value=1, max_value=500),
    st.dictionaries(st.sampled_from("abcde"), st.integers(0, 1000), min_size=1),
)
def test_the_shares_add_up_to_the_limit_and_never_go_below_zero(
    limit: int, demand: dict[str, int]
) -> None:
    shares = targets(limit, demand)
    assert sum(shares.values()) == limit
    assert set(shares) == set(demand) and min(shares.values()) >= 0

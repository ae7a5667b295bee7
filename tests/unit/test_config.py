"""Settings read from the environment: defaults, bounds, and errors that name the variable."""

from __future__ import annotations

from datetime import timedelta

import pytest

from horae.config import Settings
from horae.errors import ConfigError


def test_the_dispatch_lead_is_off_by_default_and_may_be_up_to_ten_seconds() -> None:
    assert Settings.from_env({}).scheduler.dispatch_lead == timedelta(0)
    for raw, seconds in (("0", 0), ("0.5", 0.5), ("10", 10)):
        env = {"HORAE_DISPATCH_LEAD_SECONDS": raw}
        assert Settings.from_env(env).scheduler.dispatch_lead == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ("10.5", "HORAE_DISPATCH_LEAD_SECONDS: must be at most 10, got '10.5'"),
        ("-0.1", "HORAE_DISPATCH_LEAD_SECONDS: must be >= 0, got '-0.1'"),
        ("nan", "HORAE_DISPATCH_LEAD_SECONDS: must be >= 0, got 'nan'"),
        ("soon", "HORAE_DISPATCH_LEAD_SECONDS: expected seconds as a number, got 'soon'"),
    ],
)
def test_a_bad_dispatch_lead_is_refused_by_name(raw: str, error: str) -> None:
    with pytest.raises(ConfigError) as refused:
        Settings.from_env({"HORAE_DISPATCH_LEAD_SECONDS": raw})
    assert str(refused.value) == error


def test_a_burst_is_1000_due_in_a_quarter_second_published_2_s_ahead_by_default() -> None:
    scheduler = Settings.from_env({}).scheduler
    assert (scheduler.burst_lead, scheduler.burst_size) == (timedelta(seconds=2), 1_000)
    env = {"HORAE_BURST_LEAD_SECONDS": "0", "HORAE_BURST_SIZE": "50"}
    scheduler = Settings.from_env(env).scheduler
    assert (scheduler.burst_lead, scheduler.burst_size) == (timedelta(0), 50)


@pytest.mark.parametrize(
    ("env", "error"),
    [
        (
            {"HORAE_BURST_LEAD_SECONDS": "11"},
            "HORAE_BURST_LEAD_SECONDS: must be at most 10, got '11'",
        ),
        ({"HORAE_BURST_LEAD_SECONDS": "-1"}, "HORAE_BURST_LEAD_SECONDS: must be >= 0, got '-1'"),
        ({"HORAE_BURST_SIZE": "0"}, "HORAE_BURST_SIZE: must be >= 1, got '0'"),
        ({"HORAE_BURST_SIZE": "many"}, "HORAE_BURST_SIZE: expected an integer, got 'many'"),
    ],
)
def test_a_bad_burst_setting_is_refused_by_name(env: dict[str, str], error: str) -> None:
    with pytest.raises(ConfigError) as refused:
        Settings.from_env(env)
    assert str(refused.value) == error


def test_dispatch_rounds_are_50_ms_apart_by_default_and_at_most_a_second() -> None:
    assert Settings.from_env({}).scheduler.dispatch_interval == timedelta(milliseconds=50)
    for raw, seconds in (("0", 0), ("0.2", 0.2), ("1", 1)):
        env = {"HORAE_DISPATCH_INTERVAL_SECONDS": raw}
        assert Settings.from_env(env).scheduler.dispatch_interval == timedelta(seconds=seconds)
    with pytest.raises(ConfigError) as refused:
        Settings.from_env({"HORAE_DISPATCH_INTERVAL_SECONDS": "1.5"})
    assert str(refused.value) == "HORAE_DISPATCH_INTERVAL_SECONDS: must be at most 1, got '1.5'"


def test_workerpools_scale_a_minute_ahead_by_default_and_at_most_ten() -> None:
    assert Settings.from_env({}).operator.scale_ahead == timedelta(seconds=60)
    assert Settings.from_env({"HORAE_SCALE_AHEAD_SECONDS": "0"}).operator.scale_ahead == timedelta(
        0
    )
    for raw, error in (("601", "must be at most 600, got '601'"), ("-1", "must be >= 0, got '-1'")):
        with pytest.raises(ConfigError) as refused:
            Settings.from_env({"HORAE_SCALE_AHEAD_SECONDS": raw})
        assert str(refused.value) == f"HORAE_SCALE_AHEAD_SECONDS: {error}"


def test_other_durations_must_still_be_above_zero() -> None:
    with pytest.raises(ConfigError) as refused:
        Settings.from_env({"HORAE_REDELIVERY_TIMEOUT_SECONDS": "0"})
    assert str(refused.value) == "HORAE_REDELIVERY_TIMEOUT_SECONDS: must be > 0, got '0'"


def test_a_scheduler_renews_its_lease_well_within_it_and_may_renew_more_often() -> None:
    defaults = Settings.from_env({}).scheduler
    assert (defaults.lease_duration, defaults.renew_period) == (
        timedelta(seconds=3),
        timedelta(seconds=1),
    )
    env = {"HORAE_LEASE_DURATION_SECONDS": "2", "HORAE_RENEW_PERIOD_SECONDS": "0.5"}
    short = Settings.from_env(env).scheduler
    assert (short.lease_duration, short.renew_period) == (
        timedelta(seconds=2),
        timedelta(seconds=0.5),
    )
    for env, error in (
        ({"HORAE_RENEW_PERIOD_SECONDS": "3"}, "(3), got 3"),
        ({"HORAE_LEASE_DURATION_SECONDS": "1"}, "(1), got 1"),
        ({"HORAE_LEASE_DURATION_SECONDS": "2", "HORAE_RENEW_PERIOD_SECONDS": "5"}, "(2), got 5"),
    ):
        with pytest.raises(ConfigError) as refused:
            Settings.from_env(env)
        assert str(refused.value) == (
            f"HORAE_RENEW_PERIOD_SECONDS: must be less than HORAE_LEASE_DURATION_SECONDS {error}"
        )


def test_a_worker_serves_its_pool_namespace_unless_given_its_tenants() -> None:
    alone = Settings.from_env({"HORAE_NAMESPACE": "team-a"}).worker
    assert (alone.pool_namespace, alone.tenants) == ("team-a", ("team-a",))
    env = {"HORAE_NAMESPACE": "horae", "HORAE_TENANTS": "team-b, team-a"}
    shared = Settings.from_env(env).worker
    assert (shared.pool_namespace, shared.tenants) == ("horae", ("team-a", "team-b"))


@pytest.mark.parametrize("raw", ["", "a,,b", " ", "x" * 254])
def test_a_bad_tenant_list_is_refused_by_name(raw: str) -> None:
    with pytest.raises(ConfigError, match="HORAE_TENANTS"):
        Settings.from_env({"HORAE_TENANTS": raw})

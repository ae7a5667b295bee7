"""DST, calendar and cross-implementation checks for `horae.schedule`.

Expected values come from Debian cron's DST rules and the tz database (zoneinfo),
never from `cronsim` (which `horae.schedule` uses to walk wall-clock times):

- a job at a fixed local time that spring-forward skips runs once, right after the jump;
- a job at a fixed local time that fall-back repeats runs once, at the first occurrence;
- a job with `*` or a step in its minute or hour field follows real (UTC) time.

The 2026 transitions used here are asserted against zoneinfo in
`test_the_tz_database_has_the_transitions_these_tests_assume`.
"""

from __future__ import annotations

import calendar
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta
from itertools import islice, pairwise, takewhile
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from horae.schedule import cron_times, next_fire_times, validate_cron

MINUTE = timedelta(minutes=1)
SECOND = timedelta(seconds=1)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def fires(expression: str, zone: str, after: datetime, count: int) -> list[datetime]:
    return list(islice(cron_times(expression, zone, after), count))


def fires_until(expression: str, zone: str, after: datetime, until: datetime) -> list[datetime]:
    """Fire times in (after, until]."""
    return list(takewhile(lambda t: t <= until, cron_times(expression, zone, after)))


def wall(instant: datetime, zone: str) -> str:
    """Local wall-clock time with its UTC offset, e.g. '01:30-0400'."""
    return instant.astimezone(ZoneInfo(zone)).strftime("%H:%M%z")


def offset_change(zone: str, lo: datetime, hi: datetime) -> datetime:
    """The first UTC instant in (lo, hi] whose UTC offset in `zone` differs from lo's."""
    tz = ZoneInfo(zone)
    before = lo.astimezone(tz).utcoffset()
    assert hi.astimezone(tz).utcoffset() != before, f"no transition in {zone} in ({lo}, {hi}]"
    lo_s, hi_s = int(lo.timestamp()), int(hi.timestamp())
    while hi_s - lo_s > 1:
        mid = (lo_s + hi_s) // 2
        if datetime.fromtimestamp(mid, UTC).astimezone(tz).utcoffset() == before:
            lo_s = mid
        else:
            hi_s = mid
    return datetime.fromtimestamp(hi_s, UTC)


# --- the tz database ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "instant", "offset_before", "offset_after"),
    [
        # 02:00 EST -> 03:00 EDT
        ("America/New_York", utc(2026, 3, 8, 7), timedelta(hours=-5), timedelta(hours=-4)),
        # 02:00 EDT -> 01:00 EST
        ("America/New_York", utc(2026, 11, 1, 6), timedelta(hours=-4), timedelta(hours=-5)),
        # 01:00 GMT -> 02:00 BST
        ("Europe/London", utc(2026, 3, 29, 1), timedelta(0), timedelta(hours=1)),
        # 02:00 BST -> 01:00 GMT
        ("Europe/London", utc(2026, 10, 25, 1), timedelta(hours=1), timedelta(0)),
        # 02:00 +11:00 -> 01:30 +10:30 (first Sunday of April)
        (
            "Australia/Lord_Howe",
            utc(2026, 4, 4, 15),
            timedelta(hours=11),
            timedelta(hours=10, minutes=30),
        ),
        # 02:00 +10:30 -> 02:30 +11:00 (first Sunday of October)
        (
            "Australia/Lord_Howe",
            utc(2026, 10, 3, 15, 30),
            timedelta(hours=10, minutes=30),
            timedelta(hours=11),
        ),
    ],
)
def test_the_tz_database_has_the_transitions_these_tests_assume(
    zone: str, instant: datetime, offset_before: timedelta, offset_after: timedelta
) -> None:
    tz = ZoneInfo(zone)
    found = offset_change(zone, instant - timedelta(days=2), instant + timedelta(days=2))
    assert found == instant
    assert (instant - SECOND).astimezone(tz).utcoffset() == offset_before
    assert instant.astimezone(tz).utcoffset() == offset_after


# --- America/New_York -----------------------------------------------------------------------


@pytest.mark.parametrize("minute", [0, 30, 59])
def test_fixed_time_in_the_skipped_hour_runs_once_after_the_jump_in_new_york(
    minute: int,
) -> None:
    # 2026-03-08 02:00-02:59 does not exist; the clock jumps at 07:00 UTC to 03:00 EDT.
    times = fires(f"{minute} 2 * * *", "America/New_York", utc(2026, 3, 7, 12), 2)
    assert times == [utc(2026, 3, 8, 7), utc(2026, 3, 9, 6, minute)]
    assert [wall(t, "America/New_York") for t in times] == ["03:00-0400", f"02:{minute:02}-0400"]


def test_fixed_time_after_the_skipped_hour_is_unaffected_in_new_york() -> None:
    assert fires("30 3 * * *", "America/New_York", utc(2026, 3, 7, 12), 1) == [
        utc(2026, 3, 8, 7, 30)
    ]


def test_every_skipped_minute_of_one_job_collapses_into_a_single_run_after_the_jump() -> None:
    times = fires("0,15,30,45 2 * * *", "America/New_York", utc(2026, 3, 7, 12), 2)
    assert times == [utc(2026, 3, 8, 7), utc(2026, 3, 9, 6)]


@pytest.mark.parametrize("minute", [0, 30, 59])
def test_fixed_time_in_the_repeated_hour_runs_exactly_once_in_new_york(minute: int) -> None:
    # 2026-11-01 01:00-01:59 happens twice: first EDT (05:xx UTC), then EST (06:xx UTC).
    times = fires(f"{minute} 1 * * *", "America/New_York", utc(2026, 10, 31, 12), 2)
    assert times == [utc(2026, 11, 1, 5, minute), utc(2026, 11, 2, 6, minute)]
    assert [wall(t, "America/New_York") for t in times] == [
        f"01:{minute:02}-0400",
        f"01:{minute:02}-0500",
    ]


def test_a_restart_during_the_repeated_hour_does_not_run_the_fixed_time_job_again() -> None:
    # 06:10 UTC is 01:10 EST, the second pass; 01:30 already ran at 05:30 UTC (EDT).
    times = next_fire_times(
        run_at=None,
        cron="30 1 * * *",
        time_zone="America/New_York",
        after=utc(2026, 11, 1, 6, 10),
        count=1,
    )
    assert times == [utc(2026, 11, 2, 6, 30)]


def test_quarter_hourly_job_follows_real_time_across_spring_forward_in_new_york() -> None:
    after, until = utc(2026, 3, 8, 5), utc(2026, 3, 8, 9)  # 00:00 EST .. 05:00 EDT
    times = fires_until("*/15 * * * *", "America/New_York", after, until)
    assert times == [after + k * timedelta(minutes=15) for k in range(1, 17)]
    walls = [wall(t, "America/New_York") for t in times]
    assert walls[6:9] == ["01:45-0500", "03:00-0400", "03:15-0400"]
    assert not any(w.startswith("02:") for w in walls)


def test_quarter_hourly_job_follows_real_time_across_fall_back_in_new_york() -> None:
    after, until = utc(2026, 11, 1, 4), utc(2026, 11, 1, 8)  # 00:00 EDT .. 03:00 EST
    times = fires_until("*/15 * * * *", "America/New_York", after, until)
    assert times == [after + k * timedelta(minutes=15) for k in range(1, 17)]
    per_wall_time = Counter(t.astimezone(ZoneInfo("America/New_York")).time() for t in times)
    for minute in (0, 15, 30, 45):
        assert per_wall_time[time(1, minute)] == 2
    assert per_wall_time[time(0, 15)] == 1
    assert per_wall_time[time(2, 0)] == 1


@pytest.mark.parametrize(
    ("zone", "shift"),
    [
        ("America/New_York", utc(2026, 11, 1, 6)),  # 02:00 EDT -> 01:00 EST
        ("Europe/Berlin", utc(2026, 10, 25, 1)),  # 03:00 CEST -> 02:00 CET
        ("Australia/Lord_Howe", utc(2026, 4, 4, 15)),  # 02:00 +11 -> 01:30 +10:30
    ],
)
def test_a_minutely_job_fires_every_real_minute_from_inside_the_repeated_time(
    zone: str, shift: datetime
) -> None:
    # Asked from inside the first pass of the repeated wall times: the first repeated
    # minute (the instant of the shift) was lost (hypothesis found it on Lord Howe).
    after = shift - timedelta(minutes=5)
    times = fires_until("* * * * *", zone, after, shift + timedelta(minutes=5))
    assert times == [after + k * timedelta(minutes=1) for k in range(1, 11)]


@pytest.mark.parametrize(
    ("after", "until"),
    [
        (utc(2026, 3, 8, 4), utc(2026, 3, 8, 10)),  # across spring forward
        (utc(2026, 11, 1, 4), utc(2026, 11, 1, 9)),  # across fall back
        (utc(2026, 3, 7), utc(2026, 3, 10)),
        (utc(2026, 10, 31), utc(2026, 11, 3)),
    ],
)
def test_hourly_job_fires_once_per_elapsed_real_hour_in_new_york(
    after: datetime, until: datetime
) -> None:
    elapsed_hours = (until - after) // timedelta(hours=1)
    times = fires_until("0 * * * *", "America/New_York", after, until)
    assert len(times) == elapsed_hours
    assert all(b - a == timedelta(hours=1) for a, b in pairwise(times))


def test_hourly_job_skips_the_missing_local_hour_and_repeats_the_doubled_one() -> None:
    spring = fires_until("0 * * * *", "America/New_York", utc(2026, 3, 8, 4), utc(2026, 3, 8, 8))
    assert [wall(t, "America/New_York") for t in spring] == [
        "00:00-0500",
        "01:00-0500",
        "03:00-0400",
        "04:00-0400",
    ]
    fall = fires_until("@hourly", "America/New_York", utc(2026, 11, 1, 4), utc(2026, 11, 1, 8))
    assert [wall(t, "America/New_York") for t in fall] == [
        "01:00-0400",
        "01:00-0500",
        "02:00-0500",
        "03:00-0500",
    ]


# --- Europe/London --------------------------------------------------------------------------


def test_fixed_time_in_the_skipped_hour_runs_once_after_the_jump_in_london() -> None:
    # 2026-03-29 01:00-01:59 does not exist; the clock jumps at 01:00 UTC to 02:00 BST.
    times = fires("30 1 * * *", "Europe/London", utc(2026, 3, 28, 12), 2)
    assert times == [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30)]
    assert [wall(t, "Europe/London") for t in times] == ["02:00+0100", "01:30+0100"]


def test_fixed_time_in_the_repeated_hour_runs_exactly_once_in_london() -> None:
    # 2026-10-25 01:00-01:59 happens twice: first BST (00:xx UTC), then GMT (01:xx UTC).
    times = fires("30 1 * * *", "Europe/London", utc(2026, 10, 24, 12), 2)
    assert times == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]
    assert [wall(t, "Europe/London") for t in times] == ["01:30+0100", "01:30+0000"]


def test_daily_midnight_job_keeps_local_midnight_across_london_transitions() -> None:
    spring = fires("@daily", "Europe/London", utc(2026, 3, 28, 12), 2)
    assert spring == [utc(2026, 3, 29, 0), utc(2026, 3, 29, 23)]  # 00:00 GMT, 00:00 BST
    fall = fires("@daily", "Europe/London", utc(2026, 10, 24, 12), 2)
    assert fall == [utc(2026, 10, 24, 23), utc(2026, 10, 26, 0)]  # 00:00 BST, 00:00 GMT


def test_quarter_hourly_and_hourly_jobs_follow_real_time_in_london() -> None:
    for after, until in [
        (utc(2026, 3, 28, 22), utc(2026, 3, 29, 4)),
        (utc(2026, 10, 24, 22), utc(2026, 10, 25, 4)),
    ]:
        quarter = fires_until("*/15 * * * *", "Europe/London", after, until)
        assert quarter == [after + k * timedelta(minutes=15) for k in range(1, 6 * 4 + 1)]
        hourly = fires_until("0 * * * *", "Europe/London", after, until)
        assert hourly == [after + k * timedelta(hours=1) for k in range(1, 7)]
    spring = fires_until("0 * * * *", "Europe/London", utc(2026, 3, 28, 23), utc(2026, 3, 29, 2))
    assert [wall(t, "Europe/London") for t in spring] == ["00:00+0000", "02:00+0100", "03:00+0100"]
    fall = fires_until("0 * * * *", "Europe/London", utc(2026, 10, 24, 23), utc(2026, 10, 25, 2))
    assert [wall(t, "Europe/London") for t in fall] == ["01:00+0100", "01:00+0000", "02:00+0000"]


# --- Australia/Lord_Howe (30-minute shifts) -------------------------------------------------


@pytest.mark.parametrize("minute", [0, 15, 29])
def test_fixed_time_in_the_skipped_half_hour_runs_once_after_the_jump_on_lord_howe(
    minute: int,
) -> None:
    # 2026-10-04 02:00-02:29 does not exist; at 15:30 UTC the clock jumps to 02:30 +11:00.
    times = fires(f"{minute} 2 * * *", "Australia/Lord_Howe", utc(2026, 10, 3), 2)
    assert times[0] == utc(2026, 10, 3, 15, 30)
    assert wall(times[0], "Australia/Lord_Howe") == "02:30+1100"
    assert times[1] == datetime(2026, 10, 5, 2, minute, tzinfo=ZoneInfo("Australia/Lord_Howe"))


def test_fixed_time_just_after_the_skipped_half_hour_is_unaffected_on_lord_howe() -> None:
    times = fires("45 2 * * *", "Australia/Lord_Howe", utc(2026, 10, 3), 1)
    assert times == [utc(2026, 10, 3, 15, 45)]
    assert wall(times[0], "Australia/Lord_Howe") == "02:45+1100"


@pytest.mark.parametrize("minute", [30, 45, 59])
def test_fixed_time_in_the_repeated_half_hour_runs_exactly_once_on_lord_howe(
    minute: int,
) -> None:
    # 2026-04-05 01:30-01:59 happens twice: first at +11:00, then at +10:30.
    first = datetime(2026, 4, 5, 1, minute, tzinfo=ZoneInfo("Australia/Lord_Howe"), fold=0)
    second = first.replace(fold=1)
    assert second.astimezone(UTC) - first.astimezone(UTC) == timedelta(minutes=30)
    times = fires(f"{minute} 1 * * *", "Australia/Lord_Howe", utc(2026, 4, 4), 2)
    assert times[0] == utc(2026, 4, 4, 14, minute)
    assert times[0] == first.astimezone(UTC)
    assert times[1] == datetime(2026, 4, 6, 1, minute, tzinfo=ZoneInfo("Australia/Lord_Howe"))


def test_fixed_time_before_the_repeated_half_hour_runs_once_on_lord_howe() -> None:
    times = fires("15 1 * * *", "Australia/Lord_Howe", utc(2026, 4, 4), 2)
    assert times == [utc(2026, 4, 4, 14, 15), utc(2026, 4, 5, 14, 45)]
    assert [wall(t, "Australia/Lord_Howe") for t in times] == ["01:15+1100", "01:15+1030"]


def test_hourly_job_follows_the_local_hour_through_half_hour_shifts_on_lord_howe() -> None:
    autumn = fires_until(
        "0 * * * *", "Australia/Lord_Howe", utc(2026, 4, 4, 12), utc(2026, 4, 4, 17, 30)
    )
    assert autumn == [
        utc(2026, 4, 4, 13),  # 00:00 +11
        utc(2026, 4, 4, 14),  # 01:00 +11
        utc(2026, 4, 4, 15, 30),  # 02:00 +10:30; 90 real minutes later
        utc(2026, 4, 4, 16, 30),
        utc(2026, 4, 4, 17, 30),
    ]
    spring = fires_until(
        "0 * * * *", "Australia/Lord_Howe", utc(2026, 10, 3, 13), utc(2026, 10, 3, 17)
    )
    assert spring == [
        utc(2026, 10, 3, 13, 30),  # 00:00 +10:30
        utc(2026, 10, 3, 14, 30),  # 01:00 +10:30
        utc(2026, 10, 3, 16),  # 03:00 +11; 02:00 never happened
        utc(2026, 10, 3, 17),
    ]


def test_quarter_hourly_job_follows_real_time_through_half_hour_shifts_on_lord_howe() -> None:
    zone = "Australia/Lord_Howe"
    autumn_after = utc(2026, 4, 4, 14)  # 01:00 +11
    autumn = fires_until("*/15 * * * *", zone, autumn_after, utc(2026, 4, 4, 16))
    assert autumn == [autumn_after + k * timedelta(minutes=15) for k in range(1, 9)]
    assert [wall(t, zone) for t in autumn] == [
        "01:15+1100",
        "01:30+1100",
        "01:45+1100",
        "01:30+1030",
        "01:45+1030",
        "02:00+1030",
        "02:15+1030",
        "02:30+1030",
    ]
    spring_after = utc(2026, 10, 3, 14, 30)  # 01:00 +10:30
    spring = fires_until("*/15 * * * *", zone, spring_after, utc(2026, 10, 3, 16))
    assert spring == [spring_after + k * timedelta(minutes=15) for k in range(1, 7)]
    assert [wall(t, zone) for t in spring] == [
        "01:15+1030",
        "01:30+1030",
        "01:45+1030",
        "02:30+1100",
        "02:45+1100",
        "03:00+1100",
    ]


def field_matches(spec: str, value: int) -> bool:
    """Whether a minute or hour field made of `*`, `*/n` and comma lists matches `value`."""
    if spec == "*":
        return True
    if spec.startswith("*/"):
        return value % int(spec[2:]) == 0
    return value in {int(v) for v in spec.split(",")}


def real_minutes_matching(
    expression: str, zone: str, after: datetime, until: datetime
) -> list[datetime]:
    """Every whole UTC minute in (after, until] whose local wall time matches `M H * * *`."""
    minute_spec, hour_spec = expression.split()[:2]
    tz = ZoneInfo(zone)
    found = []
    instant = after + MINUTE
    while instant <= until:
        local = instant.astimezone(tz)
        if field_matches(minute_spec, local.minute) and field_matches(hour_spec, local.hour):
            found.append(instant)
        instant += MINUTE
    return found


# Real-time jobs around Lord Howe's 30-minute transitions: (expression, after, until, expected).
LORD_HOWE_REAL_TIME_CASES = [
    pytest.param(
        "30 * * * *",
        utc(2026, 4, 4, 13),
        utc(2026, 4, 4, 17),
        # 00:30 +11, 01:30 +11, 01:30 +10:30 (again), 02:30 +10:30, 03:30 +10:30
        [
            utc(2026, 4, 4, 13, 30),
            utc(2026, 4, 4, 14, 30),
            utc(2026, 4, 4, 15),
            utc(2026, 4, 4, 16),
            utc(2026, 4, 4, 17),
        ],
        id="half-past-hourly-at-fall-back",
    ),
    pytest.param(
        "30 * * * *",
        utc(2026, 10, 3, 13),
        utc(2026, 10, 3, 17),
        # 00:30 +10:30, 01:30 +10:30, 02:30 +11 (the first minute after the jump), 03:30 +11
        [
            utc(2026, 10, 3, 14),
            utc(2026, 10, 3, 15),
            utc(2026, 10, 3, 15, 30),
            utc(2026, 10, 3, 16, 30),
        ],
        id="half-past-hourly-at-spring-forward",
    ),
    pytest.param(
        "0 */2 * * *",
        utc(2026, 4, 4, 12),
        utc(2026, 4, 4, 18),
        # 00:00 +11, 02:00 +10:30 (happens once), 04:00 +10:30
        [utc(2026, 4, 4, 13), utc(2026, 4, 4, 15, 30), utc(2026, 4, 4, 17, 30)],
        id="two-hourly-at-fall-back",
    ),
    pytest.param(
        "*/15 3 * * *",
        utc(2026, 10, 3, 12),
        utc(2026, 10, 3, 17),
        # 03:00, 03:15, 03:30, 03:45 +11
        [
            utc(2026, 10, 3, 16),
            utc(2026, 10, 3, 16, 15),
            utc(2026, 10, 3, 16, 30),
            utc(2026, 10, 3, 16, 45),
        ],
        id="quarter-hourly-in-hour-3-at-spring-forward",
    ),
]


@pytest.mark.parametrize(("expression", "after", "until", "expected"), LORD_HOWE_REAL_TIME_CASES)
def test_lord_howe_real_time_expectations_agree_with_a_minute_by_minute_scan(
    expression: str, after: datetime, until: datetime, expected: list[datetime]
) -> None:
    assert real_minutes_matching(expression, "Australia/Lord_Howe", after, until) == expected


@pytest.mark.parametrize(("expression", "after", "until", "expected"), LORD_HOWE_REAL_TIME_CASES)
def test_real_time_job_fires_on_every_matching_real_minute_across_lord_howe_shifts(
    expression: str, after: datetime, until: datetime, expected: list[datetime]
) -> None:
    assert fires_until(expression, "Australia/Lord_Howe", after, until) == expected


# --- calendar: Feb 29, L and # ----------------------------------------------------------------


def test_feb_29_job_waits_for_the_next_leap_years() -> None:
    assert fires("0 12 29 2 *", "UTC", utc(2026, 1, 1), 2) == [
        utc(2028, 2, 29, 12),
        utc(2032, 2, 29, 12),
    ]


def test_feb_29_job_is_valid() -> None:
    validate_cron("0 12 29 2 *")


def test_last_day_of_month_is_feb_28_in_2027_and_feb_29_in_2028() -> None:
    validate_cron("0 0 L * *")
    assert fires("0 0 L * *", "UTC", utc(2027, 2, 1), 2) == [utc(2027, 2, 28), utc(2027, 3, 31)]
    assert fires("0 0 L * *", "UTC", utc(2028, 2, 1), 2) == [utc(2028, 2, 29), utc(2028, 3, 31)]


def test_last_day_of_month_job_fires_on_every_month_end_for_two_years() -> None:
    times = fires("0 0 L * *", "UTC", utc(2027, 1, 1), 24)
    expected = [
        utc(year, month, calendar.monthrange(year, month)[1])
        for year in (2027, 2028)
        for month in range(1, 13)
    ]
    assert times == expected


def second_monday(year: int, month: int) -> date:
    mondays = [
        week[calendar.MONDAY]
        for week in calendar.monthcalendar(year, month)
        if week[calendar.MONDAY] != 0
    ]
    return date(year, month, mondays[1])


def test_nth_weekday_fires_on_the_second_monday_of_each_month() -> None:
    validate_cron("0 9 * * 1#2")
    times = fires("0 9 * * 1#2", "UTC", utc(2026, 1, 1), 12)
    expected = [datetime.combine(second_monday(2026, m), time(9), UTC) for m in range(1, 13)]
    assert times == expected
    assert times[2] == utc(2026, 3, 9, 9)  # March 2026 starts on a Sunday


@pytest.mark.parametrize("expression", ["0 9 * * 1#6", "0 9 * * 1#0", "0 0 32 * *", "0 0 30 2 *"])
def test_impossible_calendar_expressions_are_rejected(expression: str) -> None:
    with pytest.raises(ValueError):
        validate_cron(expression)


# --- seconds field (six fields, seconds first) ----------------------------------------------


def test_every_twenty_seconds_fires_at_zero_twenty_and_forty() -> None:
    times = fires("*/20 * * * * *", "UTC", utc(2026, 1, 1), 9)
    assert times == [utc(2026, 1, 1) + k * timedelta(seconds=20) for k in range(1, 10)]
    assert {t.second for t in fires("*/20 * * * * *", "UTC", utc(2026, 1, 1, 0, 0, 7), 60)} == {
        0,
        20,
        40,
    }


def test_seconds_first_job_runs_at_nine_oh_oh_thirty_in_tokyo() -> None:
    # "30 0 9 * * *": second 30, minute 0, hour 9 local; Tokyo is UTC+9 without DST.
    times = fires("30 0 9 * * *", "Asia/Tokyo", utc(2026, 1, 1), 3)
    assert times == [
        utc(2026, 1, 1, 0, 0, 30),
        utc(2026, 1, 2, 0, 0, 30),
        utc(2026, 1, 3, 0, 0, 30),
    ]
    assert times[0].astimezone(ZoneInfo("Asia/Tokyo")).time() == time(9, 0, 30)


def test_seconds_first_fixed_time_in_the_skipped_hour_runs_once_after_the_jump() -> None:
    times = fires("0 30 2 * * *", "America/New_York", utc(2026, 3, 7, 12), 2)
    assert times == [utc(2026, 3, 8, 7), utc(2026, 3, 9, 6, 30)]


def test_seconds_first_fixed_time_in_the_repeated_hour_runs_exactly_once() -> None:
    times = fires("0 30 1 * * *", "America/New_York", utc(2026, 10, 31, 12), 2)
    assert times == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]


# --- properties -----------------------------------------------------------------------------

# Each zone with a start shortly before one of its 2026 transitions, so that `after`
# (start plus up to 40 hours) lands before or around it; UTC and Tokyo have none.
ZONE_STARTS = [
    ("America/New_York", utc(2026, 3, 7)),
    ("America/New_York", utc(2026, 10, 31)),
    ("Europe/London", utc(2026, 3, 28)),
    ("Europe/London", utc(2026, 10, 24)),
    ("Australia/Lord_Howe", utc(2026, 4, 3)),
    ("Australia/Lord_Howe", utc(2026, 10, 2)),
    ("UTC", utc(2026, 3, 7)),
    ("Asia/Tokyo", utc(2026, 10, 31)),
]
PROPERTY_FIRES = 40


def field_values(upper: int, likely: Sequence[int]) -> st.SearchStrategy[list[int] | None]:
    """None stands for `*`; otherwise a sorted list of distinct values, often from `likely`.

    `likely` holds the hours or minutes where the transitions happen, so that fixed-time
    jobs land in skipped and repeated wall times often enough to matter.
    """
    value = st.one_of(st.sampled_from(likely), st.integers(0, upper))
    values = st.lists(value, min_size=1, max_size=4, unique=True).map(sorted)
    return st.one_of(st.none(), values)


def field_text(values: Sequence[int] | None) -> str:
    return "*" if values is None else ",".join(map(str, values))


def matches(local: datetime, minutes: Sequence[int] | None, hours: Sequence[int] | None) -> bool:
    return (
        local.second == 0
        and local.microsecond == 0
        and (minutes is None or local.minute in minutes)
        and (hours is None or local.hour in hours)
    )


def skipped_wall_times_before(instant: datetime, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """The naive wall-clock interval [start, end) that a jump ending at `instant` skipped.

    Empty (start == end) when the clock did not jump forward at `instant`.
    """
    end = instant.astimezone(tz).replace(tzinfo=None)
    start = (instant - SECOND).astimezone(tz).replace(tzinfo=None) + SECOND
    return start, max(start, end)


def debian_model(
    minutes: Sequence[int] | None,
    hours: Sequence[int] | None,
    zone: str,
    after: datetime,
    count: int,
) -> list[datetime]:
    """An independent model of Debian cron for `M H * * *`, by brute force over zoneinfo."""
    tz = ZoneInfo(zone)
    if minutes is None or hours is None:
        # Wildcard job: every real minute whose local wall time matches.
        found: list[datetime] = []
        instant = after.replace(second=0, microsecond=0) + MINUTE
        while len(found) < count:
            if matches(instant.astimezone(tz), minutes, hours):
                found.append(instant)
            instant += MINUTE
        return found

    def resolve(naive: datetime) -> datetime:
        # fold=0 picks the first of a repeated wall time; a skipped wall time moves on
        # minute by minute to the first wall time that exists, i.e. right after the jump.
        while naive.replace(tzinfo=tz).astimezone(UTC).astimezone(tz).replace(tzinfo=None) != naive:
            naive += MINUTE
        return naive.replace(tzinfo=tz).astimezone(UTC)

    fixed: set[datetime] = set()
    day = after.astimezone(tz).date() - timedelta(days=1)
    while len(fixed) < count:
        for hour in hours:
            for minute in minutes:
                fire = resolve(datetime.combine(day, time(hour, minute)))
                if fire > after:
                    fixed.add(fire)
        day += timedelta(days=1)
    return sorted(fixed)[:count]


@settings(max_examples=60, deadline=None)
@given(
    minutes=field_values(59, likely=[0, 15, 29, 30, 45, 59]),
    hours=field_values(23, likely=[0, 1, 2, 3]),
    zone_start=st.sampled_from(ZONE_STARTS),
    offset_seconds=st.integers(0, 40 * 3600),
)
def test_fire_times_strictly_increase_and_match_the_minute_and_hour_fields(
    minutes: list[int] | None,
    hours: list[int] | None,
    zone_start: tuple[str, datetime],
    offset_seconds: int,
) -> None:
    zone, start = zone_start
    tz = ZoneInfo(zone)
    after = start + timedelta(seconds=offset_seconds)
    expression = f"{field_text(minutes)} {field_text(hours)} * * *"
    fixed_time = minutes is not None and hours is not None
    times = fires(expression, zone, after, PROPERTY_FIRES)

    assert len(times) == PROPERTY_FIRES
    assert times[0] > after
    assert all(a < b for a, b in pairwise(times))
    for fire in times:
        assert fire.tzinfo == UTC
        if matches(fire.astimezone(tz), minutes, hours):
            continue
        # The only allowed mismatch: a fixed-time job whose wall time a jump skipped,
        # run at the first instant after the jump.
        assert fixed_time, f"{expression} in {zone}: {fire} does not match"
        assert minutes is not None and hours is not None
        skipped_from, skipped_to = skipped_wall_times_before(fire, tz)
        nominal = [
            datetime.combine(day, time(h, m))
            for day in {skipped_from.date(), skipped_to.date()}
            for h in hours
            for m in minutes
        ]
        assert any(skipped_from <= n < skipped_to for n in nominal), (
            f"{expression} in {zone}: {fire} matches neither the fields nor a skipped time"
        )
    if fixed_time:
        # A repeated wall time runs once: no two fires share a local wall-clock time.
        walls = [t.astimezone(tz).replace(tzinfo=None) for t in times]
        assert len(set(walls)) == len(walls)


@settings(max_examples=60, deadline=None)
@given(
    minutes=field_values(59, likely=[0, 15, 29, 30, 45, 59]),
    hours=field_values(23, likely=[0, 1, 2, 3]),
    zone_start=st.sampled_from(ZONE_STARTS),
    offset_seconds=st.integers(0, 40 * 3600),
)
def test_fire_times_agree_with_a_brute_force_model_of_debian_cron(
    minutes: list[int] | None,
    hours: list[int] | None,
    zone_start: tuple[str, datetime],
    offset_seconds: int,
) -> None:
    zone, start = zone_start
    after = start + timedelta(seconds=offset_seconds)
    expression = f"{field_text(minutes)} {field_text(hours)} * * *"
    expected = debian_model(minutes, hours, zone, after, PROPERTY_FIRES)
    assert fires(expression, zone, after, PROPERTY_FIRES) == expected


# --- cross-check against croniter -----------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        "*/15 * * * *",
        "5-50/10 */3 * * *",
        "0 9 * * 1-5",
        "30 6 1,15 * *",
        "0 0 * * 0",
        "15 10 * JAN,APR,JUL,OCT MON",
        "0 12 13 * 5",
        "0 0 1 */2 *",
        "*/7 8-17 * * MON-FRI",
        "0 0 31 * *",
        "59 23 * * 6,0",
    ],
)
def test_horae_agrees_with_croniter_where_dst_plays_no_part(expression: str) -> None:
    after = utc(2026, 1, 1)
    reference = croniter(expression, after)
    expected = [reference.get_next(datetime) for _ in range(50)]
    assert fires(expression, "UTC", after, 50) == expected


def test_croniter_runs_a_repeated_fixed_time_twice_which_is_why_it_is_not_the_engine() -> None:
    zone = ZoneInfo("America/New_York")
    after = utc(2026, 10, 31, 12)
    reference = croniter("30 1 * * *", after.astimezone(zone))
    croniter_times = [reference.get_next(datetime).astimezone(UTC) for _ in range(3)]
    # croniter 01:30 EDT and again 01:30 EST on 2026-11-01.
    assert croniter_times == [
        utc(2026, 11, 1, 5, 30),
        utc(2026, 11, 1, 6, 30),
        utc(2026, 11, 2, 6, 30),
    ]
    # Debian cron, and so horae: once.
    assert fires("30 1 * * *", "America/New_York", after, 2) == [
        utc(2026, 11, 1, 5, 30),
        utc(2026, 11, 2, 6, 30),
    ]

"""Properties of `horae.schedule` on random cron expressions (5 fields, and 6 with seconds
first; ranges, steps, lists in every field) in random IANA time zones, DST ones included:

- fire times strictly increase, in UTC;
- each lies on the expression: its wall-clock time in the zone matches every field, as
  croniter's matcher reads it, except the one exception the DST policy makes (a fixed-time
  job whose wall time a spring-forward skipped runs once at the jump);
- they are croniter's fire times (an independent implementation) wherever no UTC offset
  change is near; near one, the documented Debian rules apply instead (croniter runs a
  repeated fixed time twice): tests/unit/test_schedule_dst.py checks those rules.

test_schedule_dst.py's properties cover `M H * * *` in a few zones; these cover the other
fields, seconds, and every zone of the tz database.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise
from zoneinfo import ZoneInfo, available_timezones

from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from horae.schedule import _follows_real_time, cron_times, validate_cron

FIRES = 24
NEAR = timedelta(hours=4)
"""Fires this close to an offset change are left to the DST tests (the largest change in
the tz database is 2 hours, and a skipped wall time fires at the jump itself)."""
ZONES = sorted(z for z in available_timezones() if not z.startswith(("posix", "right")))

# (lowest, highest) of each field; days of month stop at 28 so that every random
# expression can fire (30 February is refused, as test_schedule_dst.py checks).
SECOND, MINUTE, HOUR, DAY, MONTH, WEEKDAY = (0, 59), (0, 59), (0, 23), (1, 28), (1, 12), (0, 6)


@st.composite
def cron_field(
    draw: st.DrawFn, bounds: tuple[int, int], star: float = 0.4, star_steps: bool = True
) -> str:
    lo, hi = bounds
    if draw(st.floats(0, 1)) < star:
        if not star_steps:
            return "*"
        return draw(st.sampled_from(["*", f"*/{draw(st.integers(1, max(1, (hi - lo) // 2)))}"]))
    kind = draw(st.sampled_from(["value", "range", "step", "list"]))
    # Ranges and steps span at least two values: croniter reads a one-value range `a-a`
    # wrongly (`* * * * 0-0` fires every day, `55-55/2` does not match :55).
    a = draw(st.integers(lo, hi - 1))
    b = draw(st.integers(a + 1, hi))
    if kind == "value":
        return str(a)
    if kind == "range":
        return f"{a}-{b}"
    if kind == "step":
        return f"{a}-{b}/{draw(st.integers(1, max(1, hi - lo)))}"
    values = draw(st.lists(st.integers(lo, hi), min_size=2, max_size=4, unique=True))
    return ",".join(map(str, sorted(values)))


@st.composite
def cron_expression(draw: st.DrawFn) -> str:
    # Minutes and hours often fixed (the DST-sensitive case), day fields often `*`.
    fields = [
        draw(cron_field(MINUTE, star=0.3)), draw(cron_field(HOUR, star=0.3)),
        draw(cron_field(DAY, star=0.7, star_steps=False)), draw(cron_field(MONTH, star=0.7)),
        draw(cron_field(WEEKDAY, star=0.7, star_steps=False)),
    ]  # fmt: skip
    if draw(st.booleans()):
        fields.insert(0, draw(cron_field(SECOND, star=0.3)))
    return " ".join(fields)


instants = st.datetimes(datetime(2020, 1, 1), datetime(2035, 1, 1)).map(
    lambda naive: naive.replace(tzinfo=UTC)
)


def near_offset_change(instant: datetime, zone: ZoneInfo) -> bool:
    return (instant - NEAR).astimezone(zone).utcoffset() != (instant + NEAR).astimezone(
        zone
    ).utcoffset()


def at_a_forward_jump(instant: datetime, zone: ZoneInfo) -> bool:
    before = (instant - timedelta(seconds=1)).astimezone(zone).utcoffset()
    after = instant.astimezone(zone).utcoffset()
    assert before is not None and after is not None
    return after > before


def croniter_times(
    expression: str, zone: ZoneInfo, after: datetime, until: datetime
) -> list[datetime]:
    seconds_first = len(expression.split()) == 6
    walker = croniter(expression, after.astimezone(zone), second_at_beginning=seconds_first)
    found: list[datetime] = []
    while len(found) <= 2 * FIRES:  # bounded: a disagreement shows within that many
        fire = walker.get_next(datetime).astimezone(UTC)
        if fire > until:
            break
        found.append(fire)
    return found


@settings(max_examples=400, deadline=None)
@given(expression=cron_expression(), zone_name=st.sampled_from(ZONES), after=instants)
def test_fire_times_increase_lie_on_the_expression_and_agree_with_croniter(
    expression: str, zone_name: str, after: datetime
) -> None:
    validate_cron(expression)
    zone = ZoneInfo(zone_name)
    seconds_first = len(expression.split()) == 6
    fires = list(islice(cron_times(expression, zone_name, after), FIRES))

    assert len(fires) == FIRES
    assert fires[0] > after
    assert all(a < b for a, b in pairwise(fires)), fires
    for fire in fires:
        assert fire.tzinfo == UTC
        wall = fire.astimezone(zone).replace(tzinfo=None)
        if croniter.match(expression, wall, second_at_beginning=seconds_first):
            continue
        assert not _follows_real_time(expression) and at_a_forward_jump(fire, zone), (
            f"{expression} in {zone_name}: {fire} ({wall} local) is not on the expression"
        )

    reference = croniter_times(expression, zone, after, fires[-1])
    ours = [f for f in fires if not near_offset_change(f, zone)]
    theirs = [f for f in reference if not near_offset_change(f, zone)]
    assert ours == theirs, f"{expression} in {zone_name} after {after}"


def test_a_starred_step_in_a_day_field_still_counts_as_a_star_as_in_vixie_and_debian_cron() -> None:
    # Both day fields restricted: either may match. A field starting with `*` (`*/1` too)
    # counts as unrestricted, so `*/1` days and Sundays means Sundays; croniter reads it as
    # "any day or Sunday", which is why the property above draws no `*/n` day fields.
    after = datetime(2020, 1, 1, tzinfo=UTC)  # a Wednesday
    [first] = islice(cron_times("0 0 */1 * 0", "UTC", after), 1)
    assert first == datetime(2020, 1, 5, tzinfo=UTC)
    assert croniter("0 0 */1 * 0", after).get_next(datetime) == datetime(2020, 1, 2, tzinfo=UTC)

"""What of a gap runs (`occurrences.catch_up`): each policy, the window, the cap, the grace,
pauses, and gaps across DST changes in time zones."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from horae.domain.limits import CATCH_UP_GRACE, MAX_CATCH_UP_RUNS, MAX_SKIPPED_ROWS
from horae.models import JobSpec
from horae.store.occurrences import CatchUp, catch_up

JOB = uuid.UUID(int=7)
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
TICK = timedelta(microseconds=1)


def every_10s(policy: str, window: int | None = None, **more: object) -> JobSpec:
    return JobSpec(
        task="t",
        cron="*/10 * * * * *",
        catch_up=policy,
        catch_up_window_seconds=window,
        **more,  # type: ignore[arg-type]  # the remaining JobSpec fields, by keyword
    )


def outage(spec: JobSpec, minutes: int = 5) -> CatchUp:
    """The scheduler comes back `minutes` after the row at T0 was due, and judges it."""
    return catch_up(JOB, spec, after=T0 - TICK, now=T0 + timedelta(minutes=minutes))


def times(gap: CatchUp) -> tuple[list[datetime], list[datetime]]:
    """(run, recorded skipped) occurrence times."""
    return [o.occurrence_at for o in gap.runs], [s.occurrence.occurrence_at for s in gap.skipped]


def at(*seconds: int) -> list[datetime]:
    return [T0 + timedelta(seconds=s) for s in seconds]


def test_an_outage_with_skip_runs_nothing_of_the_gap_and_resumes_after_it() -> None:
    gap = outage(every_10s("Skip"))
    runs, skipped = times(gap)
    # Due by now - GRACE (T0 + 295 s): T0 ... T0 + 290 s, 30 occurrences.
    assert runs == [] and skipped == at(*range(0, 300, 10))
    assert gap.resume is not None and gap.resume.occurrence_at == at(300)[0]
    assert gap.first is not None and "policy Skip" in gap.first.message
    assert all("policy Skip" in s.message for s in gap.skipped)


def test_an_outage_with_latest_runs_the_newest_occurrence_only() -> None:
    gap = outage(every_10s("Latest"))
    runs, skipped = times(gap)
    assert runs == at(290) and skipped == at(*range(0, 290, 10))
    assert gap.resume == gap.runs[0]
    assert gap.first is not None and "policy Latest" in gap.first.message


def test_an_outage_with_all_runs_every_missed_occurrence_from_the_first() -> None:
    gap = outage(every_10s("All"))
    runs, skipped = times(gap)
    assert runs == at(*range(0, 300, 10)) and skipped == []
    assert gap.first is None  # the pending row runs
    assert gap.resume is not None and gap.resume.occurrence_at == T0


def test_all_with_a_window_runs_only_the_occurrences_due_within_it() -> None:
    gap = outage(every_10s("All", window=60))
    runs, skipped = times(gap)
    assert runs == at(240, 250, 260, 270, 280, 290)
    assert skipped == at(*range(0, 240, 10))
    assert gap.first is not None
    assert gap.first.message == "outside the catch-up window of 1m (5m late)"


def test_latest_outside_its_window_runs_nothing() -> None:
    gap = outage(every_10s("Latest", window=3))  # the newest is 10 s late
    assert gap.runs == ()
    assert gap.resume is not None and gap.resume.occurrence_at == at(300)[0]
    newest = gap.skipped[-1]
    assert newest.occurrence.occurrence_at == at(290)[0]
    assert newest.message.startswith("outside the catch-up window of 3s")


def test_all_replays_at_most_the_cap_and_records_at_most_the_newest_skipped() -> None:
    spec = JobSpec(task="t", cron="* * * * * *", catch_up="All")
    now = T0 + timedelta(hours=1)
    gap = catch_up(JOB, spec, after=T0 - TICK, now=now)
    last = now - CATCH_UP_GRACE
    assert len(gap.runs) == MAX_CATCH_UP_RUNS
    assert gap.runs[-1].occurrence_at == last
    assert len(gap.skipped) == MAX_SKIPPED_ROWS
    assert gap.skipped[-1].occurrence.occurrence_at == gap.runs[0].occurrence_at - timedelta(
        seconds=1
    )
    assert gap.first is not None and "beyond the catch-up cap" in gap.first.message


def test_a_year_of_every_second_costs_no_more_than_a_minute() -> None:
    # 31.5 M missed occurrences: the answer is built from the newest few hundred only.
    spec = JobSpec(task="t", cron="* * * * * *", catch_up="Latest")
    now = T0 + timedelta(days=365)
    gap = catch_up(JOB, spec, after=T0 - TICK, now=now)
    assert [o.occurrence_at for o in gap.runs] == [now - CATCH_UP_GRACE]
    assert len(gap.skipped) == MAX_SKIPPED_ROWS


@pytest.mark.parametrize("policy", ["Skip", "Latest", "All"])
def test_lateness_within_the_grace_is_no_gap_and_the_row_runs(policy: str) -> None:
    # Due at T0 and T0 + 10 s; now T0 + 14 s: the successor is due only 4 s ago.
    gap = catch_up(JOB, every_10s(policy), after=T0 - TICK, now=T0 + timedelta(seconds=14))
    assert gap.first is None and times(gap) == (at(0), [])


@pytest.mark.parametrize("policy", ["Skip", "Latest", "All"])
def test_one_late_occurrence_with_no_successor_due_runs_within_the_window(policy: str) -> None:
    spec = JobSpec(task="t", cron="0 * * * *", catch_up=policy)
    gap = catch_up(JOB, spec, after=T0 - TICK, now=T0 + timedelta(minutes=30))
    assert gap.first is None and times(gap) == ([T0], [])
    windowed = spec.model_copy(update={"catch_up_window_seconds": 600})
    gap = catch_up(JOB, windowed, after=T0 - TICK, now=T0 + timedelta(minutes=30))
    assert gap.runs == () and gap.first is not None
    assert gap.first.message == "outside the catch-up window of 10m (30m late)"
    assert gap.resume is not None and gap.resume.occurrence_at == T0 + timedelta(hours=1)


def test_a_pause_records_its_occurrences_as_paused_and_runs_by_the_policy() -> None:
    spec = every_10s("All", window=30)
    gap = catch_up(JOB, spec, after=T0, now=T0 + timedelta(minutes=2), paused=True)
    runs, skipped = times(gap)
    # (T0, T0 + 115 s]: 10 ... 110; within 30 s of T0 + 120 s: 90, 100, 110.
    assert runs == at(90, 100, 110) and skipped == at(*range(10, 90, 10))
    assert all(s.message.startswith("job was paused at this time; ") for s in gap.skipped)


def test_a_pause_with_one_missed_occurrence_and_skip_runs_nothing() -> None:
    spec = JobSpec(task="t", cron="0 * * * *", catch_up="Skip")
    gap = catch_up(JOB, spec, after=T0 - TICK, now=T0 + timedelta(minutes=30), paused=True)
    assert gap.runs == () and times(gap)[1] == [T0]
    assert gap.resume is not None and gap.resume.occurrence_at == T0 + timedelta(hours=1)


def test_no_gap_resumes_at_the_next_occurrence() -> None:
    gap = catch_up(JOB, every_10s("Skip"), after=T0, now=T0 + timedelta(seconds=3))
    assert (gap.first, gap.skipped, gap.runs) == (None, (), ())
    assert gap.resume is not None and gap.resume.occurrence_at == at(10)[0]


def test_the_jitter_moves_due_times_and_the_window_judges_them() -> None:
    spec = every_10s("All", window=60, jitter_seconds=5)
    gap = outage(spec)
    offsets = {o.due_at - o.occurrence_at for o in gap.runs}
    assert len(offsets) == 1 and timedelta(0) <= offsets.pop() < timedelta(seconds=5)
    now = T0 + timedelta(minutes=5)
    assert all(now - timedelta(seconds=60) <= o.due_at <= now - CATCH_UP_GRACE for o in gap.runs)


def test_a_gap_across_spring_forward_in_paris_counts_real_time() -> None:
    # 2026-03-29 02:00 Paris does not exist: a daily 02:30 job fires once at 03:00 (Debian
    # cron's rule); three days away, Latest runs the newest, the two before are skipped.
    paris = ZoneInfo("Europe/Paris")
    spec = JobSpec(task="t", cron="30 2 * * *", time_zone="Europe/Paris", catch_up="Latest")
    first = datetime(2026, 3, 28, 2, 30, tzinfo=paris).astimezone(UTC)
    now = datetime(2026, 3, 30, 12, 0, tzinfo=paris).astimezone(UTC)
    gap = catch_up(JOB, spec, after=first - TICK, now=now)
    runs, skipped = times(gap)
    assert skipped == [first, datetime(2026, 3, 29, 3, 0, tzinfo=paris).astimezone(UTC)]
    assert runs == [datetime(2026, 3, 30, 2, 30, tzinfo=paris).astimezone(UTC)]


def test_a_gap_across_fall_back_in_new_york_runs_a_repeated_hour_twice() -> None:
    # 2026-11-01 01:00-02:00 happens twice in New York; `*/30 * * * *` follows real time.
    ny = ZoneInfo("America/New_York")
    spec = JobSpec(task="t", cron="*/30 * * * *", time_zone="America/New_York", catch_up="All")
    start = datetime(2026, 11, 1, 0, 30, tzinfo=ny).astimezone(UTC)
    now = start + timedelta(hours=3, minutes=1)
    gap = catch_up(JOB, spec, after=start - TICK, now=now)
    runs, _ = times(gap)
    assert runs == [start + timedelta(minutes=30 * k) for k in range(7)]
    assert len({r.astimezone(ny).replace(tzinfo=None) for r in runs}) == 5  # 01:00, 01:30 twice

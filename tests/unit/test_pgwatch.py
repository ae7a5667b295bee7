"""The sustained benchmark's PostgreSQL series (bench.pgwatch): samples reduced per second
after the first due time, and the lines printed beside the lag."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from bench.pgwatch import PgWatch, report, summary


def watch(samples: list[tuple[float, int, int, int]]) -> PgWatch:
    w = PgWatch(stores=None, first_due=datetime(2026, 12, 3, tzinfo=UTC))  # type: ignore[arg-type]
    w._samples = samples
    return w


def test_a_second_keeps_its_last_dead_count_its_mean_lock_waiters_and_its_vacuums() -> None:
    series = watch([
        (-0.5, 1, 9, 3),  # before the first due time: only the vacuums' baseline
        (0.0, 10, 0, 3), (0.25, 12, 1, 4), (0.5, 14, 2, 4), (0.75, 16, 1, 4),
        (2.1, 40, 4, 6),  # second 1 was not sampled (the sampler itself stalled)
    ]).per_second()  # fmt: skip
    assert series["dead_tuples"][0] == 16 and series["dead_tuples"][2] == 40
    assert series["lock_waiting"][0] == 1.0 and series["lock_waiting"][2] == 4.0
    assert series["autovacuum"][0] == 1 and series["autovacuum"][2] == 2
    assert all(math.isnan(series[k][1]) for k in series)
    assert len(series["lock_waiting"]) == 3


def test_the_report_puts_each_5_s_lag_beside_postgres_and_the_summary_names_the_worst() -> None:
    series = {"dead_tuples": [5.0] * 5 + [50.0] * 5, "lock_waiting": [0.0] * 5 + [2.0] * 5,
              "autovacuum": [0.0] * 5 + [1.0, 0.0, 0.0, 0.0, 0.0]}  # fmt: skip
    lags = [0.1] * 10 + [3.0] * 10
    starts = [1.0] * 10 + [6.0] * 10
    header, first, second = report(series, lags, starts)
    assert header.split() == ["s", "starts/s", "p99", "lag", "lock-waiting", "dead", "rows",
                              "autovacuums"]  # fmt: skip
    assert first.split() == ["0", "2", "0.10", "s", "0.00", "5", "0"]
    assert second.split() == ["5", "2", "3.00", "s", "2.00", "50", "1"]
    assert summary(series) == (
        "lock-waiting sessions mean 1.00, worst second 2.00; dead row "
        "versions in executions up to 50; autovacuum runs 1 in 10 s"
    )

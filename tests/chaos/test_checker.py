"""The history checker on small hand-made histories: each invariant caught, and a clean
history passing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path

from horae.models import shard_of
from tests.chaos.checker import Fault, History, Invocation, Promise, Sample, check
from tests.chaos.harness import post_mortem

LEASE = 6.0


def run(execution: str, job: str, at: float, *, occurrence: float = 100.0, worker: str = "w-1",
        attempt: int = 1, ended: float | None = 0.1, failed: bool = False,
        tenant: str = "a", due: float | None = None) -> Invocation:  # fmt: skip
    return Invocation(
        execution, job, attempt, occurrence, occurrence if due is None else due, tenant,
        worker, at, None if ended is None else at + ended, failed,
    )  # fmt: skip


def history(
    invocations: Sequence[Invocation],
    *,
    promises: Sequence[Promise] = (Promise("j1", "a", "one-off", (100.0,), 90.0),),
    faults: Sequence[Fault] = (),
    samples: Sequence[Sample] = (),
    final: dict[str, str] | None = None,
    limits: dict[str, int] | None = None,
) -> History:
    statuses = final if final is not None else {i.execution_id: "succeeded" for i in invocations}
    return History(promises, invocations, faults, samples, statuses, limits or {}, LEASE)


def test_a_clean_history_passes() -> None:
    report = check(history([run("e1", "j1", 100.2)]))
    assert report.ok, report.format()
    assert (report.promised, report.lag_samples) == (1, 1)
    assert abs(report.lag_p99 - 0.2) < 1e-9


def test_an_occurrence_that_never_ran_is_lost() -> None:
    report = check(history([]))
    assert len(report.lost) == 1 and "never started" in report.lost[0]
    assert not report.ok


def test_an_occurrence_whose_every_run_died_midway_is_lost() -> None:
    report = check(history([run("e1", "j1", 100.2, ended=None)]))
    assert len(report.lost) == 1 and "never completed" in report.lost[0]


def test_retries_after_failures_on_purpose_are_neither_lost_nor_duplicates() -> None:
    invocations = [
        run("e1", "j1", 100.1, failed=True),
        run("e2", "j1", 101.0, attempt=2, failed=True, worker="w-2"),
        run("e3", "j1", 102.0, attempt=3),
    ]
    report = check(history(invocations))
    assert report.ok, report.format()
    assert report.duplicates == []


def test_one_execution_run_twice_within_its_lease_is_a_double_claim() -> None:
    report = check(history([run("e1", "j1", 100.1, ended=None), run("e1", "j1", 101.0,
                                                                    worker="w-2")]))  # fmt: skip
    assert len(report.double_claims) == 1
    assert not report.ok


def test_one_execution_run_again_after_a_healthy_owner_kept_heartbeating_is_a_double_claim(
) -> None:  # fmt: skip
    report = check(history([run("e1", "j1", 100.1, ended=None), run("e1", "j1", 130.0,
                                                                    worker="w-2")]))  # fmt: skip
    assert len(report.double_claims) == 1


def test_an_execution_handed_back_by_a_stopping_worker_may_run_again() -> None:
    term = Fault("term", "w-1", 105.0, 106.0)
    invocations = [run("e1", "j1", 100.1, ended=None), run("e1", "j1", 120.0, worker="w-2")]
    report = check(history(invocations, faults=[term]))
    assert report.double_claims == []
    assert len(report.duplicates) == 1 and "term of w-1" in report.duplicates[0]
    assert report.ok, report.format()


def test_a_run_handed_back_within_its_lease_is_no_double_claim_once_its_handler_stopped(
) -> None:  # fmt: skip
    # The handler's stop is recorded (tasks.py) before the worker hands the execution back;
    # without it, a second claim within the lease is one while the first may still run.
    term = Fault("term", "w-1", 99.0, 106.0)
    stopped = [run("e1", "j1", 100.1, ended=4.0), run("e1", "j1", 104.5, worker="w-2")]
    report = check(history(stopped, faults=[term]))
    assert report.double_claims == [] and report.ok, report.format()
    assert len(report.duplicates) == 1 and "term of w-1" in report.duplicates[0]
    unstopped = [run("e1", "j1", 100.1, ended=None), run("e1", "j1", 104.5, worker="w-2")]
    assert len(check(history(unstopped, faults=[term])).double_claims) == 1


def test_a_duplicate_after_a_paused_owner_lost_its_lease_is_explained() -> None:
    pause = Fault("pause", "w-1", 100.5, 112.0)
    invocations = [
        run("e1", "j1", 100.1, ended=12.0),  # the zombie finishes when it wakes
        run("e2", "j1", 108.0, attempt=2, worker="w-2"),
    ]
    report = check(history(invocations, faults=[pause]))
    assert report.ok, report.format()
    assert len(report.duplicates) == 1 and "pause of w-1" in report.duplicates[0]


def test_a_duplicate_no_fault_explains_fails_the_run() -> None:
    invocations = [run("e1", "j1", 100.1), run("e2", "j1", 108.0, attempt=2, worker="w-2")]
    report = check(history(invocations))
    assert len(report.unexplained_duplicates) == 1
    assert not report.ok


def test_an_execution_not_terminal_after_quiescence_is_stuck() -> None:
    report = check(history([run("e1", "j1", 100.1)], final={"e1": "succeeded", "e2": "running"}))
    assert report.stuck == ["execution e2: running"]
    assert not report.ok


def test_a_terminal_status_that_changes_is_reported() -> None:
    samples = [Sample(101.0, terminal={"e1": "failed"}), Sample(102.0, terminal={"e1": "dead"})]
    report = check(history([run("e1", "j1", 100.1)], samples=samples, final={"e1": "dead"}))
    assert report.changed_terminal == ["execution e1: failed -> dead"]


def test_a_terminal_status_that_changes_after_the_last_sample_is_reported() -> None:
    samples = [Sample(101.0, terminal={"e1": "failed"})]
    report = check(history([run("e1", "j1", 100.1)], samples=samples))
    assert len(report.changed_terminal) == 1 and "(final)" in report.changed_terminal[0]


def test_an_epoch_that_goes_backwards_is_reported() -> None:
    samples = [Sample(101.0, epochs={3: 5}), Sample(102.0, epochs={3: 4})]
    report = check(history([run("e1", "j1", 100.1)], samples=samples))
    assert len(report.epochs_backwards) == 1 and not report.ok


def test_more_running_than_a_tenant_limit_is_reported() -> None:
    samples = [Sample(101.0, running={"a": 3}), Sample(102.0, running={"a": 2})]
    report = check(history([run("e1", "j1", 100.1)], samples=samples, limits={"a": 2}))
    assert len(report.over_limit) == 1 and not report.ok


def test_a_run_of_a_time_the_job_never_fires_is_a_phantom() -> None:
    report = check(history([run("e1", "j1", 100.1), run("e2", "j1", 107.0, occurrence=107.0)]))
    assert len(report.phantoms) == 1 and not report.ok


def test_start_lag_counts_only_runs_no_fault_touched() -> None:
    promises = [Promise("j1", "a", "one-off", (100.0,), 90.0),
                Promise("j2", "a", "one-off", (200.0,), 90.0)]  # fmt: skip
    invocations = [run("e1", "j1", 105.0), run("e2", "j2", 200.5, occurrence=200.0)]
    kill = Fault("kill", "scheduler-1", 99.0, 99.0)
    report = check(history(invocations, promises=promises, faults=[kill]))
    assert report.lag_samples == 1 and abs(report.lag_p99 - 0.5) < 1e-9
    assert report.ok, report.format()
    late = check(history(invocations, promises=promises))
    assert late.lag_p99 == 5.0 and not late.ok
    assert late.late == ["due 100.000, started 5.000 s late on w-1 (job j1, attempt 1); "
                         "no fault in the 30 s before"]  # fmt: skip


def test_a_late_untouched_run_is_listed_with_the_faults_that_ended_shortly_before_it() -> None:
    """What to read first when the judged lag fails: which runs, where, after what."""
    invocations = [run("e1", "j1", 102.5)]
    earlier = [Fault("term", "scheduler-1", 80.0, 88.0), Fault("kill", "worker-2", 66.0, 67.0),
               Fault("pause", "worker-1", 50.0, 51.0)]  # fmt: skip
    report = check(history(invocations, faults=earlier))
    assert not report.ok
    assert report.late == ["due 100.000, started 2.500 s late on w-1 (job j1, attempt 1); "
                           "term scheduler-1 ended 12.0 s before; kill worker-2 ended 33.0 s "
                           "before"]  # fmt: skip
    assert report.late[0] in report.format()


def test_a_limited_tenants_backlog_cancelled_with_its_job_is_withdrawn_not_lost() -> None:
    withdrawn = frozenset({("j1", 100.0)})
    base = history([])
    limited = History(base.promises, [], [], [], {}, {"a": 2}, LEASE, withdrawn)
    report = check(limited)
    assert report.lost == [] and report.withdrawn == 1
    unlimited = History(base.promises, [], [], [], {}, {}, LEASE, withdrawn)
    assert len(check(unlimited).lost) == 1, "an unlimited tenant's occurrence is owed"


def test_the_post_mortem_of_a_lost_occurrence_gathers_its_faults_rows_and_log_lines(
    tmp_path: Path,
) -> None:
    lost_job, other_job = "ab202bfb-d687-41b1-b9bf-13d60c6584a7", str(uuid.UUID(int=1))
    shard = shard_of(uuid.UUID(lost_job), 64)  # 39
    (tmp_path / "faults.jsonl").write_text(json.dumps(
        {"kind": "partition", "target": "scheduler-18", "start": 1796083078.9,
         "end": 1796083095.0, "detail": ""}) + "\n")  # fmt: skip
    (tmp_path / "executions.csv").write_text(
        "id,job_id,occurrence_at,attempt,status\n"
        f"e1,{lost_job},2026-11-30 23:58:00+00,1,succeeded\n"
        f"e2,{other_job},2026-11-30 23:58:00+00,1,succeeded\n"
    )  # fmt: skip
    (tmp_path / "shard_epochs.csv").write_text(
        f"shard,epoch,owner\n{shard},7,scheduler-18\n3,1,x\n"
    )
    took = (
        f'{{"ts": "2026-11-30T23:58:12.000+00:00", "msg": "took shard {shard}", "shard": {shard}}}'
    )
    ran = f'{{"ts": "2026-11-30T23:58:22.984+00:00", "msg": "ended", "job_id": "{lost_job}"}}'
    unrelated = took.replace(f"{shard}", f"{shard}0").replace("23:58:12", "23:58:01")
    report = check(history([]))
    report.lost.append(
        f"job {lost_job} (cron */5s, t-free) occurrence 1796083085.000: never started"
    )
    text = post_mortem(
        report, tmp_path, [("worker-9", ran), ("scheduler-17", f"{unrelated}\n{took}")]
    )
    assert "  23:57:58.900 - 23:58:15.000 partition scheduler-18" in text
    assert f"{lost_job}, e1, 2026-11-30 23:58:00+00, 1, succeeded" in text
    assert other_job not in text and unrelated not in text and "'shard': '3'" not in text
    assert text.endswith(f"  scheduler-17: {took}\n  worker-9: {ran}")  # in time order
    assert post_mortem(check(history([run("e1", "j1", 100.2)])), tmp_path, []) == ""


def test_runs_a_fault_touched_are_reported_apart_and_not_judged() -> None:
    """A run due while PostgreSQL restarted started 64 s late: not in the judged lag (the
    untouched runs'), but counted among the touched ones over 60 s."""
    promises = (Promise("j1", "a", "one-off", (100.0,), 90.0),
                Promise("j2", "a", "one-off", (300.0,), 90.0))  # fmt: skip
    restart = Fault("pg_restart", "postgres", 99.0, 104.0)
    report = check(history([run("e1", "j1", 164.0), run("e2", "j2", 300.1, occurrence=300.0)],
                           promises=promises, faults=[restart]))  # fmt: skip
    assert report.ok, report.format()
    assert report.lag_samples == 1 and abs(report.lag_max - 0.1) < 1e-9
    assert report.touched_lags == [64.0]
    assert "> 60 s: 1" in report.format()
    assert report.after_whole == [60.0]  # PostgreSQL was back at 104
    assert "  the same, after whole again            1 runs: p99 60.000 s" in report.format()
    assert report.slow_after_whole == [
        "due 100.000, started 60.000 s after whole again (64.000 s late) on w-1 (job j1, "
        "attempt 1); touched by pg_restart postgres -1.0 s to +4.0 s"
    ]
    assert "    due 100.000, started 60.000 s after whole again" in report.format()


def test_after_a_pair_of_faults_the_wait_counts_from_the_later_ones_end() -> None:
    """A worker paused, then PostgreSQL restarted while it was: whole again at 108."""
    pause = Fault("pause", "w-2", 98.0, 103.0)
    restart = Fault("pg_restart", "postgres", 102.0, 108.0)
    report = check(history([run("e1", "j1", 110.5)], faults=[pause, restart]))
    assert report.touched_lags == [10.5] and report.after_whole == [2.5]
    assert "> 5 s: 0" in report.format().splitlines()[-2]
    assert report.slow_after_whole == []


def test_a_host_stall_excuses_the_start_lag_it_overlaps_and_no_duplicate() -> None:
    """The harness's timer woke 2.4 s late: the machine, not Horae, held the run up. Its
    lag is reported apart; a second run inside the stall is still an unexplained
    duplicate."""
    stall = Fault("host_stall", "host", 99.8, 102.3, "2.45 s")
    late = check(history([run("e1", "j1", 102.4)], faults=[stall]))
    assert late.ok, late.format()
    assert late.lag_samples == 0 and [round(x, 3) for x in late.touched_lags] == [2.4]
    assert late.stalls == [2.5] and late.faults == {}
    assert "host stalls (not judged)                 1  longest 2.50 s" in late.format()
    twice = [run("e1", "j1", 100.1), run("e2", "j1", 101.0, attempt=2, worker="w-2")]
    assert len(check(history(twice, faults=[stall])).unexplained_duplicates) == 1

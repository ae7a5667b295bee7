"""What the tables of `horae executions` and `horae jobs ls` show, `-o table` and `-o wide`."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from horae.api.schemas import JobOut
from horae.cli.tables import executions_grid, jobs_grid
from horae.models import ExecutionStatus
from horae.store.rows import ExecutionRow
from tests.support.execution_ids import made_at

DUE = datetime(2026, 12, 2, 5, 4, 3, tzinfo=UTC)


def execution(ms: int, **changes: Any) -> ExecutionRow:
    fields: dict[str, Any] = dict(
        id=made_at(ms),
        job_id=uuid.uuid4(),
        tenant="acme",
        task="send-invoice",
        shard=3,
        due_at=DUE,
        occurrence_at=DUE,
        attempt=1,
        job_version=1,
        status=ExecutionStatus.SUCCEEDED,
        cancel_requested=False,
        starting_deadline_seconds=None,
        concurrency_policy="Allow",
        lease_owner="worker-7",
        lease_until=None,
        enqueued_at=DUE,
        dispatch_epoch=1,
        started_at=DUE + timedelta(milliseconds=42),
        finished_at=DUE + timedelta(seconds=1.5),
        error_kind=None,
        error_message=None,
        result=None,
        created_at=DUE,
        manual=False,
    )
    return ExecutionRow(**{**fields, **changes})


def test_the_table_shows_each_run_by_the_digits_that_tell_it_apart() -> None:
    start = 1_790_000_000_000
    runs = [execution(start + 3000 * k) for k in range(3)]
    failed = execution(
        start + 9000,
        status=ExecutionStatus.DEAD,
        error_kind="ValueError",
        error_message="x" * 80,
        started_at=None,
        finished_at=None,
    )
    rows = [("acme/invoices", r) for r in [*runs, failed]]
    grid = executions_grid(rows, wide=False)
    assert grid.columns == ["JOB", "EXECUTION", "ATTEMPT", "STATUS", "DUE", "START LAG", "ERROR"]
    assert grid.column("EXECUTION") == [r.id.hex[:12] for _, r in rows]
    assert grid.rows[0] == [
        "acme/invoices",
        runs[0].id.hex[:12],
        "1",
        "succeeded",
        "05:04:03",
        "42ms",
        "",
    ]
    assert grid.rows[3][-3:] == ["05:04:03", "", "x" * 50]


def test_the_wide_table_shows_ids_times_and_errors_whole_and_more_columns() -> None:
    run = execution(1_790_000_000_000)
    dead = execution(
        1_790_000_003_000,
        status=ExecutionStatus.DEAD,
        error_kind="ValueError",
        error_message="no such customer " + "x" * 300,
        lease_owner=None,
    )
    grid = executions_grid([("j", run), ("j", dead)], wide=True)
    assert grid.columns == [
        "JOB",
        "EXECUTION",
        "TASK",
        "ATTEMPT",
        "STATUS",
        "OCCURRENCE",
        "DUE",
        "START LAG",
        "DURATION",
        "WORKER",
        "ERROR",
        "RESULT",
    ]
    assert grid.rows[0] == [
        "j",
        str(run.id),
        "send-invoice",
        "1",
        "succeeded",
        "2026-12-02 05:04:03Z",
        "2026-12-02 05:04:03Z",
        "42ms",
        "1.458s",
        "worker-7",
        "",
        "",
    ]
    assert grid.rows[1][-3:-1] == ["", ("ValueError: no such customer " + "x" * 300)[:200]]


def test_the_wide_table_shows_a_result_as_compact_json_cut_to_200_characters() -> None:
    small = execution(1_790_000_000_000, result={"sent": 3, "to": ["a@x"]})
    large = execution(1_790_000_003_000, result={"rows": list(range(1000))})
    grid = executions_grid([("j", small), ("j", large)], wide=True)
    shown = grid.column("RESULT")
    assert shown[0] == '{"sent":3,"to":["a@x"]}'
    assert len(shown[1]) == 200 and shown[1].startswith('{"rows":[0,1,2,') and shown[1][-1] == "…"
    assert "RESULT" not in executions_grid([("j", small)], wide=False).columns


def job(**changes: Any) -> JobOut:
    fields: dict[str, Any] = dict(
        id=uuid.uuid4(),
        tenant="acme",
        name="invoices",
        source="api",
        state="active",
        spec_version=1,
        task="send-invoice",
        payload={},
        run_at=None,
        cron="0 9 * * 1",
        time_zone="Europe/Paris",
        jitter_seconds=0,
        retry={"max_attempts": 3},
        timeout_seconds=60,
        concurrency_policy="Allow",
        starting_deadline_seconds=None,
        catch_up="Skip",
        failure_policy=None,
        consecutive_failures=0,
        paused_reason=None,
        paused_for_failures=False,
        catch_up_window_seconds=None,
        next_run_at=DUE,
        last_run_at=None,
        last_status=None,
        created_at=DUE,
        updated_at=DUE,
    )
    return JobOut.model_validate({**fields, **changes})


def test_the_wide_jobs_table_adds_source_last_run_attempts_timeout_and_creation() -> None:
    a = job()
    narrow, wide = (jobs_grid("acme", [a], wide=w) for w in (False, True))
    assert narrow.rows == [
        [
            str(a.id),
            "invoices",
            "send-invoice",
            "0 9 * * 1 (Europe/Paris)",
            "active",
            "2026-12-02 05:04:03Z",
            "-",
        ]
    ]
    assert wide.columns[: len(narrow.columns)] == narrow.columns
    assert wide.columns[len(narrow.columns) :] == [
        "SOURCE",
        "LAST RUN",
        "MAX ATTEMPTS",
        "TIMEOUT",
        "CREATED",
    ]
    assert wide.rows[0][len(narrow.columns) :] == ["api", "-", "3", "60s", "2026-12-02 05:04:03Z"]

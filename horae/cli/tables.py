"""The tables `horae jobs ls` and `horae executions` print: their columns and each row's
cells as text, for `-o table` and for `-o wide` (more columns, as kubectl's), apart from
laying them out (`render`), so that what they show can be checked as data."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from horae.cli.ids import short_ids
from horae.domain.durations import format_duration

if TYPE_CHECKING:
    from rich.table import Table

    from horae.api.schemas import JobOut
    from horae.store.rows import ExecutionRow

ERROR_CHARS = 50
"""Characters of an execution's error message the table shows (wide: `WIDE_ERROR_CHARS`)."""
WIDE_ERROR_CHARS = 200
WIDE_RESULT_CHARS = 200
"""Characters of an execution's result, as compact JSON, the wide table shows (json and
yaml show it whole)."""


@dataclass(frozen=True)
class Grid:
    """A table as text: its title, column names and rows of cells."""

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    wraps: frozenset[str] = frozenset()
    """Columns whose cells may wrap; the others keep to one line."""

    def column(self, name: str) -> list[str]:
        """The cells of one column, row by row."""
        k = self.columns.index(name)
        return [row[k] for row in self.rows]


def render(grid: Grid) -> Table:
    from rich.table import Table

    table = Table(title=grid.title, title_justify="left")
    for name in grid.columns:
        table.add_column(name, no_wrap=name not in grid.wraps)
    for row in grid.rows:
        table.add_row(*row)
    return table


def at(value: datetime | None) -> str:
    """An instant as `YYYY-MM-DD HH:MM:SSZ` (UTC); `-` for none."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ") if value else "-"


def schedule(job: JobOut) -> str:
    if job.cron is None:
        return f"once at {at(job.run_at)}"
    return job.cron if job.time_zone == "UTC" else f"{job.cron} ({job.time_zone})"


def catch_up_text(job: JobOut) -> str:
    """The job's catch-up policy and window (`All within 1h`); a one-off has none."""
    if job.cron is None:
        return "-"
    window = job.catch_up_window_seconds
    return job.catch_up.value + (f" within {format_duration(window)}" if window else "")


JOB_COLUMNS = ["ID", "NAME", "TASK", "SCHEDULE", "STATE", "NEXT RUN", "LAST STATUS"]
WIDE_JOB_COLUMNS = [*JOB_COLUMNS, "SOURCE", "LAST RUN", "MAX ATTEMPTS", "TIMEOUT", "CREATED"]


def jobs_grid(tenant: str, jobs: list[JobOut], *, wide: bool) -> Grid:
    columns = WIDE_JOB_COLUMNS if wide else JOB_COLUMNS
    one_line = {"ID", "NEXT RUN", "LAST RUN", "CREATED"}
    grid = Grid(f"jobs of tenant {tenant}", columns, wraps=frozenset(columns) - one_line)
    for j in jobs:
        cells = {
            "ID": str(j.id),
            "NAME": j.name or "-",
            "TASK": j.task,
            "SCHEDULE": schedule(j),
            "STATE": j.state.value,
            "NEXT RUN": at(j.next_run_at),
            "LAST STATUS": j.last_status.value if j.last_status else "-",
            "SOURCE": j.source.value,
            "LAST RUN": at(j.last_run_at),
            "MAX ATTEMPTS": str(j.retry.max_attempts),
            "TIMEOUT": f"{j.timeout_seconds}s" if j.timeout_seconds else "-",
            "CREATED": at(j.created_at),
        }
        grid.rows.append([cells[c] for c in columns])
    return grid


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    return (end - start).total_seconds() if start and end else None


EXECUTION_COLUMNS = ["JOB", "EXECUTION", "ATTEMPT", "STATUS", "DUE", "START LAG", "ERROR"]
WIDE_EXECUTION_COLUMNS = [
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


def _result(value: object) -> str:
    """A result as compact JSON, cut to WIDE_RESULT_CHARS (an ellipsis says so); `` for none."""
    if value is None:
        return ""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= WIDE_RESULT_CHARS else text[: WIDE_RESULT_CHARS - 1] + "…"


def executions_grid(rows: list[tuple[str, ExecutionRow]], *, wide: bool) -> Grid:
    """(job as named on the command line, execution) pairs as a table. The table shows an
    execution's id by its shortest telling form (`ids.short_ids`), due times by the time of
    day and error messages cut short; the wide one shows them whole, and more columns."""
    columns = WIDE_EXECUTION_COLUMNS if wide else EXECUTION_COLUMNS
    shown = {r.id: str(r.id) for _, r in rows} if wide else short_ids(r.id for _, r in rows)
    grid = Grid("executions", columns, wraps=frozenset({"ERROR", "RESULT"}))
    for ref, r in rows:
        lag, took = _seconds(r.due_at, r.started_at), _seconds(r.started_at, r.finished_at)
        error = ": ".join(part for part in (r.error_kind, r.error_message) if part)
        cells = {
            "JOB": ref,
            "EXECUTION": shown[r.id],
            "TASK": r.task,
            "ATTEMPT": str(r.attempt),
            "STATUS": r.status.value,
            "OCCURRENCE": at(r.occurrence_at),
            "DUE": at(r.due_at) if wide else r.due_at.astimezone(UTC).strftime("%H:%M:%S"),
            "START LAG": "" if lag is None else f"{lag * 1000:.0f}ms",
            "DURATION": "" if took is None else f"{took:.3f}s",
            "WORKER": r.lease_owner or "",
            "ERROR": error[:WIDE_ERROR_CHARS] if wide else (r.error_message or "")[:ERROR_CHARS],
            "RESULT": _result(r.result),
        }
        grid.rows.append([cells[c] for c in columns])
    return grid

"""`horae jobs backfill` and `horae backfills ls|get|cancel`: backfills of a cron job's past
occurrences, straight through the store (HORAE_DATABASE_URL), as the HTTP API's
`:backfill`, `/backfills` do. The json and yaml outputs are the API's representation
(`BackfillOut`); `-o name` prints `backfill/ID`, which `get` and `cancel` take too.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer

from horae.cli.jobs import JobArgument, jobs_app
from horae.cli.support import (
    ONE_FORMATS,
    JobRef,
    OneOutputOption,
    completes,
    fail,
    output_format,
    print_data,
    print_names,
    run,
    settings,
    store_groups,
)
from horae.cli.tables import at
from horae.domain.backfills import DEFAULT_RATE, MAX_RATE, Overlap

if TYPE_CHECKING:
    from horae.api.schemas import BackfillOut
    from horae.store.backfills import BackfillRow

backfills_app = typer.Typer(
    no_args_is_help=True, help="List, show and cancel backfills of jobs' past occurrences."
)

BackfillArgument = Annotated[str, typer.Argument(help="Backfill id (or backfill/ID).")]
_OPTION = {"from": "--from", "to": "--to", "rate": "--rate", "overlap": "--overlap"}


def _instant(option: str, text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise fail(f"{option}: not an ISO 8601 instant: {text!r}") from None
    if when.tzinfo is None:
        raise fail(f"{option}: needs a UTC offset, e.g. 2030-01-01T09:00:00Z")
    return when


def _backfill_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text.removeprefix("backfill/"))
    except ValueError:
        raise fail(f"BACKFILL must be a backfill id, got {text!r}") from None


def _out(row: BackfillRow) -> BackfillOut:
    from horae.api.schemas import BackfillOut

    return BackfillOut.from_row(row)


def _print(b: BackfillOut, fmt: str) -> None:
    if fmt == "name":
        print_names("backfill", [b.id])
        return
    if fmt != "table":
        print_data(b.model_dump(mode="json", by_alias=True), fmt)
        return
    from rich.table import Table

    from horae.cli.support import console

    details = Table(title=f"backfill {b.id}", title_justify="left", show_header=False)
    details.add_column(style="bold", no_wrap=True)
    details.add_column(overflow="fold")
    rows = {
        "job": str(b.job_id),
        "tenant": b.tenant,
        "state": b.state.value,
        "range": f"{at(b.from_at)} to {at(b.to_at)}",
        "rate": f"{b.rate}/s",
        "overlap": b.overlap.value,
        "progress": f"{b.created + b.existing}/{b.total} ({b.existing} had a run already)",
        "created": str(b.created),
        "succeeded": str(b.succeeded),
        "failed": str(b.failed),
        "cancelled": str(b.cancelled),
        "live": str(b.live),
        "cursor": at(b.cursor),
        "created at": at(b.created_at),
        "finished at": at(b.finished_at),
    }
    if b.message:
        rows["message"] = b.message
    for key, value in rows.items():
        details.add_row(key, value)
    console().print(details)


@jobs_app.command("backfill")
def jobs_backfill(
    job: JobArgument,
    from_: Annotated[
        str, typer.Option("--from", help="Start of the range (inclusive), with a UTC offset.")
    ],
    to: Annotated[
        str,
        typer.Option("--to", help="End of the range (exclusive, at most now), with a UTC offset."),
    ],
    rate: Annotated[
        int, typer.Option(help=f"Occurrences created a second at most (1 to {MAX_RATE}).")
    ] = DEFAULT_RATE,
    overlap: Annotated[
        str,
        typer.Option(
            help="Allow: backfilled runs in parallel (bounded by the rate); Forbid: one at a time.",
            autocompletion=completes(Overlap),
        ),
    ] = Overlap.ALLOW.value,
    output: OneOutputOption = "table",
) -> None:
    """Run a cron job's past occurrences in [--from, --to) now, at most --rate a second, as
    executions tagged with the backfill; occurrences that already ran are left alone."""
    from horae.domain.backfills import InvalidBackfill, check_range, check_rate
    from horae.errors import Conflict, NotFound
    from horae.store import routing
    from horae.store.backfills import NewBackfill

    ref = JobRef.parse(job)
    fmt = output_format(output, ONE_FORMATS)
    start, end = _instant("--from", from_), _instant("--to", to)
    if overlap not in list(Overlap):
        raise fail(f"--overlap must be one of {', '.join(Overlap)}; got {overlap!r}")
    try:
        check_range(start, end, datetime.now(UTC))
        check_rate(rate)
    except InvalidBackfill as exc:
        raise fail(f"{_OPTION[exc.field]}: {exc}") from None
    cfg = settings()

    async def go() -> None:
        async with store_groups(cfg.database.url) as store:
            job_id = await ref.resolve(store)
            if job_id is None:
                raise fail(f"job {ref.text} not found", 1)
            new = NewBackfill(job_id, start, end, rate, Overlap(overlap))
            try:
                row = await routing.create_backfill(store, new, now=datetime.now(UTC), tenant=None)
            except InvalidBackfill as exc:
                raise fail(f"{_OPTION[exc.field]}: {exc}") from None
            except NotFound:
                raise fail(f"job {ref.text} not found", 1) from None
            except Conflict as exc:
                raise fail(str(exc), 1) from None
        _print(_out(row), fmt)

    run(go())


@backfills_app.command("ls")
def backfills_ls(job: JobArgument, output: OneOutputOption = "table") -> None:
    """List a job's backfills, newest first, with their progress."""
    from horae.cli.support import find_job
    from horae.store import routing

    ref = JobRef.parse(job)
    fmt = output_format(output, ONE_FORMATS)
    cfg = settings()

    async def go() -> None:
        async with store_groups(cfg.database.url) as store:
            found = await find_job(store, ref)
            rows = await routing.job_backfills(store, found.id, found.tenant, 500)
        items = [_out(r) for r in rows]
        if fmt == "name":
            print_names("backfill", [b.id for b in items])
        elif fmt != "table":
            print_data([b.model_dump(mode="json", by_alias=True) for b in items], fmt)
        else:
            _print_list(items)

    run(go())


def _print_list(items: list[BackfillOut]) -> None:
    from rich.table import Table

    from horae.cli.support import console

    table = Table(box=None, pad_edge=False)
    for column in ("BACKFILL", "STATE", "FROM", "TO", "RATE", "PROGRESS", "SUCCEEDED", "FAILED"):
        table.add_column(column, no_wrap=True)
    for b in items:
        table.add_row(
            str(b.id),
            b.state.value,
            at(b.from_at),
            at(b.to_at),
            f"{b.rate}/s",
            f"{b.created + b.existing}/{b.total}",
            str(b.succeeded),
            str(b.failed),
        )
    console().print(table)


@backfills_app.command("get")
def backfills_get(backfill: BackfillArgument, output: OneOutputOption = "table") -> None:
    """Show a backfill: its range, rate, progress and its executions' outcomes."""
    from horae.errors import NotFound
    from horae.store import routing

    backfill_id = _backfill_id(backfill)
    fmt = output_format(output, ONE_FORMATS)
    cfg = settings()

    async def go() -> None:
        async with store_groups(cfg.database.url) as store:
            try:
                _, row = await routing.get_backfill(store, backfill_id, None)
            except NotFound:
                raise fail(f"backfill {backfill_id} not found", 1) from None
        _print(_out(row), fmt)

    run(go())


@backfills_app.command("cancel")
def backfills_cancel(backfill: BackfillArgument, output: OneOutputOption = "table") -> None:
    """Cancel a backfill: nothing more is created; its executions not claimed yet end
    cancelled, those running finish."""
    from horae.errors import NotFound
    from horae.store import routing

    backfill_id = _backfill_id(backfill)
    fmt = output_format(output, ONE_FORMATS)
    cfg = settings()

    async def go() -> None:
        async with store_groups(cfg.database.url) as store:
            try:
                row = await routing.cancel_backfill(
                    store, backfill_id, now=datetime.now(UTC), tenant=None
                )
            except NotFound:
                raise fail(f"backfill {backfill_id} not found", 1) from None
        _print(_out(row), fmt)

    run(go())

"""`horae explain JOB [--at TIME]`: why an occurrence of a job ran as it did, or did not run,
read straight from the store. The json and yaml outputs are the HTTP API's
(`GET /jobs/{id}/explain`, `ExplanationOut`); the table is the verdict first, then the steps
with their times."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer

from horae.cli.support import (
    JobRef,
    OutputOption,
    fail,
    find_job,
    output_format,
    print_data,
    run,
    settings,
    store_groups,
)

if TYPE_CHECKING:
    from horae.api.schemas import ExplanationOut


def explain(
    job: Annotated[
        str, typer.Argument(help="Job id (or job/ID), or NAMESPACE/NAME of a ScheduledJob.")
    ],
    at: Annotated[
        str | None,
        typer.Option(
            help="The occurrence, as an RFC 3339 instant (2026-12-02T10:00:00Z); default: the"
            " job's most recent at or before now."
        ),
    ] = None,
    output: OutputOption = "table",
) -> None:
    """Why a job's occurrence ran as it did (late, skipped, failed) or has no execution (not
    a fire time, before the job existed, paused, cancelled, past retention, not due yet):
    its due time, the shard and the replica that owned it, dispatch, claim, attempts."""
    from horae.api.schemas import ExplanationOut
    from horae.domain.instants import parse_rfc3339
    from horae.store.explain import explain_occurrence

    ref = JobRef.parse(job)
    when = None
    if at is not None:
        try:
            when = parse_rfc3339(at)
        except ValueError as exc:
            raise fail(f"--at: {exc}") from None
    fmt = output_format(output)
    cfg = settings()

    async def go() -> None:
        async with store_groups(cfg.database.url) as store:
            row = await find_job(store, ref)
            found = await explain_occurrence(
                store, row.id, tenant=None, at=when, now=datetime.now(UTC)
            )
        out = ExplanationOut.from_explanation(found)
        if fmt == "table":
            typer.echo("\n".join(lines(out, name=ref.text if ref.name else None)))
        else:
            print_data(out.model_dump(mode="json"), fmt)

    run(go())


def lines(out: ExplanationOut, *, name: str | None = None) -> list[str]:
    """The table output: the verdict, what was explained, then the steps (or, when no reason
    was found, what was checked), one a line."""
    from horae.store.explanation import when

    job = f"job {out.job_id}" + (f" ({name})" if name else "")
    what = f"occurrence {when(out.occurrence_at)}" if out.occurrence_at else f"at {when(out.at)}"
    shown = [out.verdict, f"{job}, {what}, shard {out.shard}"]
    if out.steps:
        width = max(len(s.what) for s in out.steps)
        shown += [f"  {when(s.at)}  {s.what:<{width}}  {s.detail}" for s in out.steps]
    elif out.reason == "unknown":
        shown += [f"  checked: {c}" for c in out.checked]
    return shown

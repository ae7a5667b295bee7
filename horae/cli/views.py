"""`horae schedule`, `horae tenants`, `horae executions` and `horae rerun`: what the store
holds, read (and an occurrence re-run) straight from PostgreSQL. How executions are shown
and named: `ids`; their tables: `tables`."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

import typer

from horae.cli.ids import ExecutionRef
from horae.cli.support import (
    LIST_FORMATS,
    JobRef,
    ListOutputOption,
    OutputOption,
    completes,
    console,
    fail,
    find_job,
    one_of,
    output_format,
    print_data,
    print_names,
    store_groups,
)
from horae.cli.support import run as _run
from horae.cli.support import settings as _settings
from horae.cli.tables import executions_grid, render
from horae.models import ExecutionStatus

if TYPE_CHECKING:
    from horae.store.rows import ExecutionRow, TenantRow


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""
    app.add_typer(schedule_app, name="schedule")
    app.add_typer(tenants_app, name="tenants")
    app.command()(executions)
    app.command()(rerun)


schedule_app = typer.Typer(no_args_is_help=True, help="Inspect schedules.")
tenants_app = typer.Typer(no_args_is_help=True, help="Tenants and their limits.")


@schedule_app.command("preview")
def schedule_preview(
    cron: Annotated[str, typer.Argument(help="Cron expression (5 fields, 6 with seconds first).")],
    tz: Annotated[str, typer.Option("--tz", help="IANA time zone.")] = "UTC",
    count: Annotated[int, typer.Option("-n", "--count", help="How many fire times.")] = 10,
    after: Annotated[str | None, typer.Option(help="Start after this ISO 8601 instant.")] = None,
    output: OutputOption = "table",
) -> None:
    """Print the next fire times of a cron expression (UTC and local), creating nothing."""
    from datetime import UTC, datetime
    from zoneinfo import ZoneInfo

    import pydantic

    from horae.domain.fields import first_error
    from horae.domain.instants import check_instant, rfc3339
    from horae.models import JobSpec
    from horae.schedule import next_fire_times

    if not 1 <= count <= 100:
        raise fail(f"--count must be between 1 and 100, got {count}")
    fmt = output_format(output)
    try:
        JobSpec(task="preview", cron=cron, time_zone=tz)
    except pydantic.ValidationError as exc:
        error = first_error(exc)
        field = {"cron": "CRON", "time_zone": "--tz"}.get(error.top, "CRON")
        raise fail(f"{field}: {error.reason}") from None
    start = datetime.now(UTC)
    if after is not None:
        try:
            start = datetime.fromisoformat(after)
        except ValueError:
            raise fail(f"--after: not an ISO 8601 instant: {after!r}") from None
        try:
            start = check_instant(start)
        except ValueError as exc:
            raise fail(f"--after: {exc}") from None
    zone = ZoneInfo(tz)
    fires = next_fire_times(run_at=None, cron=cron, time_zone=tz, after=start, count=count)
    times = [(rfc3339(f), f.astimezone(zone).isoformat()) for f in fires]
    if fmt != "table":
        print_data([{"utc": utc, "local": local} for utc, local in times], fmt)
        return
    for utc, local in times:
        typer.echo(f"{utc}  {local}")


TENANT_KEYS = (
    "name",
    "max_running",
    "running",
    "max_jobs",
    "jobs",
    "max_fires_per_minute",
    "fires_per_minute",
)


def _tenant_line(row: TenantRow) -> str:
    limit = row.max_running if row.max_running is not None else "-"
    return (
        f"{row.name}\tmax_running={limit}\trunning={row.running}"
        f"\tmax_jobs={row.max_jobs}\tjobs={row.jobs}"
        f"\tmax_fires_per_minute={row.max_fires_per_minute}"
        f"\tfires_per_minute={row.fires_per_minute:g}"
    )


@tenants_app.command("set")
def tenants_set(
    tenant: Annotated[str, typer.Argument(help="Tenant (namespace) name (or tenant/NAME).")],
    max_running: Annotated[
        int | None, typer.Option(help="Concurrently running executions; omit for no limit.")
    ] = None,
    max_jobs: Annotated[
        int | None,
        typer.Option(help="Quota: live (active or paused) jobs; omit for the default, 100000."),
    ] = None,
    max_fires_per_minute: Annotated[
        int | None,
        typer.Option(
            help="Quota: the sum of the live jobs' fires per minute (a cron job at its densest,"
            " a one-off 1); omit for the default, 100000."
        ),
    ] = None,
) -> None:
    """Replace a tenant's settings: its running limit and its quotas (an option left out
    takes its default)."""
    from horae.store import tenants

    limits = {
        "--max-running": max_running,
        "--max-jobs": max_jobs,
        "--max-fires-per-minute": max_fires_per_minute,
    }
    for option, value in limits.items():
        if value is not None and value < 1:
            raise fail(f"{option} must be >= 1, got {value}")
    tenant = tenant.removeprefix("tenant/")  # as `tenants ls -o name` prints it
    settings = _settings()

    async def go() -> None:
        async with store_groups(settings.database.url) as store:
            async with store.home.acquire() as conn:  # settings live in the first group
                await tenants.set_tenant_limit(
                    conn,
                    tenant,
                    max_running,
                    max_jobs=max_jobs,
                    max_fires_per_minute=max_fires_per_minute,
                )
            [row] = await tenants.in_every_group(store, tenant)
        typer.echo(_tenant_line(row).replace("\t", " ").replace(" ", ": ", 1))

    _run(go())


@tenants_app.command("ls")
def tenants_ls(output: ListOutputOption = "table") -> None:
    """List tenants with their limits and quotas (defaults filled in) and what they use
    (summed over every store group). The table shows every field: wide adds nothing."""
    from horae.store import tenants

    fmt = output_format(output, LIST_FORMATS)
    settings = _settings()

    async def go() -> None:
        async with store_groups(settings.database.url) as store:
            rows = await tenants.in_every_group(store)
        if fmt == "name":
            print_names("tenant", (row.name for row in rows))
        elif fmt in ("json", "yaml"):
            print_data([{k: getattr(row, k) for k in TENANT_KEYS} for row in rows], fmt)
        else:
            for row in rows:
                typer.echo(_tenant_line(row))

    _run(go())


def executions(
    jobs: Annotated[
        list[str], typer.Argument(help="Job ids (or job/ID), or NAMESPACE/NAME of ScheduledJobs.")
    ],
    status: Annotated[
        str | None,
        typer.Option(
            help="Only executions with this status.", autocompletion=completes(ExecutionStatus)
        ),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Newest N per job.")] = 20,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Keep refreshing.")] = False,
    for_seconds: Annotated[
        float | None, typer.Option("--for", min=0, help="With --watch: stop after N seconds.")
    ] = None,
    output: ListOutputOption = "table",
) -> None:
    """Show jobs' executions, newest first. The table shows each execution's id by its
    first 12 hex digits (more where two rows share them), which `horae rerun` takes; the
    wide table, in full."""
    from rich.live import Live

    from horae.api.schemas import ExecutionOut
    from horae.store import routing

    refs = [JobRef.parse(ref) for ref in jobs]
    one_of("--status", status, (s.value for s in ExecutionStatus))
    wanted = ExecutionStatus(status) if status else None
    fmt = output_format(output, LIST_FORMATS)
    if watch and fmt not in ("table", "wide"):
        raise fail(f"--watch: shows a table; it cannot be combined with -o {fmt}")
    settings = _settings()

    async def go() -> None:
        async with store_groups(settings.database.url) as store:
            # Every job named must exist: a typo is exit code 1, not an empty table.
            found_jobs = [(ref.text, (await find_job(store, ref)).id) for ref in refs]

            async def fetch() -> list[tuple[str, ExecutionRow]]:
                rows: list[tuple[str, ExecutionRow]] = []
                for text, job_id in found_jobs:
                    found = await routing.executions_of_job(
                        store, job_id, status=wanted, limit=limit
                    )
                    rows.extend((text, r) for r in found)
                rows.sort(key=lambda x: x[1].due_at, reverse=True)
                return rows

            rows = await fetch()
            if fmt == "name":
                print_names("execution", (r.id for _, r in rows))
                return
            if fmt in ("json", "yaml"):
                print_data([ExecutionOut.from_row(r).model_dump(mode="json") for _, r in rows], fmt)
                return
            wide = fmt == "wide"
            table = render(executions_grid(rows, wide=wide))
            out = console(table if wide else None)
            if not watch:
                out.print(table)
                return
            loop = asyncio.get_running_loop()
            deadline = loop.time() + for_seconds if for_seconds is not None else None
            with Live(table, console=out, refresh_per_second=4) as live:
                while deadline is None or loop.time() < deadline:
                    await asyncio.sleep(0.5)
                    live.update(render(executions_grid(await fetch(), wide=wide)))

    _run(go())


def rerun(
    execution: Annotated[
        str,
        typer.Argument(
            help="The execution: its id as `horae executions` shows it (8 or more leading hex"
            " digits, unique), in full, or execution/ID."
        ),
    ],
) -> None:
    """Run a dead, failed or timed-out occurrence again, now (also of a completed one-off
    job): one more attempt of the same occurrence. Prints the new execution's id."""
    from horae.errors import Conflict, NotFound
    from horae.store import jobs as jobs_store
    from horae.store import quotas, routing

    ref = ExecutionRef.parse(execution)
    settings = _settings()

    async def go() -> None:
        from datetime import UTC, datetime

        async with store_groups(settings.database.url) as store:
            execution_id = await ref.resolve(store)
            # Found in whichever group holds it; re-run in its job's group.
            found = await routing.get_execution(store, execution_id, None)
            if found is None:
                raise fail(f"execution {execution_id} not found", 1)
            group = store.catalog.group_of(found.shard)
            elsewhere = await quotas.elsewhere(store, group, [found.tenant])
            try:
                new_id = await routing.on_job(
                    store,
                    found.job_id,
                    lambda conn: jobs_store.rerun_execution(
                        conn,
                        execution_id,
                        now=datetime.now(UTC),
                        elsewhere=elsewhere,
                        found_elsewhere=found,
                    ),
                )
            except (NotFound, Conflict) as exc:
                raise fail(str(exc), 1) from None
        typer.echo(str(new_id))

    _run(go())

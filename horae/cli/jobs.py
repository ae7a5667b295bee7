"""`horae jobs`: list, show, create, edit, pause, resume, trigger and cancel jobs straight through
the store (HORAE_DATABASE_URL), one store operation each.

The json and yaml outputs are the HTTP API's job representation (`JobOut`), so a script
can switch between the two without translating; `-o name` prints `job/ID`, which every
command taking a JOB takes too.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any
from zoneinfo import ZoneInfo

import typer

from horae.cli.support import (
    LIST_FORMATS,
    ONE_FORMATS,
    JobRef,
    ListOutputOption,
    OneOutputOption,
    completes,
    fail,
    find_job,
    one_of,
    output_format,
    print_data,
    print_names,
    run,
    settings,
    store_groups,
)
from horae.cli.tables import at, catch_up_text, jobs_grid, render, schedule
from horae.models import CatchUpPolicy, ConcurrencyPolicy, JobState

if TYPE_CHECKING:
    from horae.api.schemas import JobOut
    from horae.models import JobSpec
    from horae.store.db import Conn
    from horae.store.rows import JobRow

jobs_app = typer.Typer(
    no_args_is_help=True, help="List, show, create, edit, pause, resume, trigger and cancel jobs."
)

DEFAULT_TENANT = "default"
NEXT_RUNS = 5
"""How many upcoming fire times `jobs get` shows."""

TenantOption = Annotated[str, typer.Option(help="Tenant (namespace) of the job(s).")]
JobArgument = Annotated[
    str, typer.Argument(help="Job id (or job/ID), or NAMESPACE/NAME of a ScheduledJob.")
]

# Which command-line option each JobSpec field comes from, to name it in errors.
_OPTION_OF_FIELD = {
    "task": "--task",
    "payload": "--payload",
    "run_at": "--run-at",
    "cron": "--cron",
    "time_zone": "--tz",
    "retry": "--max-attempts",
    "timeout_seconds": "--timeout",
    "failure_policy": "--pause-after-failures",
    "catch_up": "--catch-up",
    "catch_up_window_seconds": "--catch-up-window",
}


def _job_out(row: JobRow, *, with_next_runs: bool) -> JobOut:
    from horae.api.schemas import JobOut
    from horae.schedule import next_fire_times

    upcoming: list[datetime] | None = None
    if with_next_runs:
        upcoming = []
        if row.state == JobState.ACTIVE:
            upcoming = next_fire_times(
                run_at=row.run_at,
                cron=row.cron,
                time_zone=row.time_zone,
                after=datetime.now(UTC),
                count=NEXT_RUNS,
            )
    return JobOut.from_row(row, upcoming)


def _print_job(job: JobOut, fmt: str) -> None:
    if fmt == "name":
        print_names("job", [job.id])
        return
    if fmt != "table":
        print_data(job.model_dump(mode="json"), fmt)
        return
    from rich.table import Table

    from horae.cli.support import console

    details = Table(title=f"job {job.id}", title_justify="left", show_header=False)
    details.add_column(style="bold", no_wrap=True)
    details.add_column(overflow="fold")
    rows = {
        "tenant": job.tenant,
        "name": job.name or "-",
        "source": job.source.value,
        "state": job.state.value,
        "task": job.task,
        "schedule": schedule(job),
        "payload": json.dumps(job.payload),
        "max attempts": str(job.retry.max_attempts),
        "timeout": f"{job.timeout_seconds}s" if job.timeout_seconds else "-",
        "catch-up": catch_up_text(job),
        "last run": at(job.last_run_at),
        "last status": job.last_status.value if job.last_status else "-",
        "failure policy": (
            f"pause after {job.failure_policy.pause_after_consecutive_failures}"
            f" consecutive failures ({job.consecutive_failures} so far)"
            if job.failure_policy
            else "-"
        ),
        "created": at(job.created_at),
        "spec version": str(job.spec_version),
    }
    if job.state == JobState.PAUSED:
        rows["paused reason"] = job.paused_reason or "-"
    for key, value in rows.items():
        details.add_row(key, value)
    out = console()
    out.print(details)
    if job.next_runs is None:
        return
    if not job.next_runs:
        out.print(f"next runs: none (the job is {job.state.value})")
        return
    zone = ZoneInfo(job.time_zone)
    upcoming = Table(title="next runs", title_justify="left")
    upcoming.add_column("UTC", no_wrap=True)
    upcoming.add_column(f"LOCAL ({job.time_zone})", no_wrap=True)
    for fire in job.next_runs:
        upcoming.add_row(at(fire), fire.astimezone(zone).isoformat())
    out.print(upcoming)


@jobs_app.command("ls")
def jobs_ls(
    tenant: TenantOption = DEFAULT_TENANT,
    state: Annotated[
        str | None,
        typer.Option(help="Only jobs in this state.", autocompletion=completes(JobState)),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most N jobs.")] = 100,
    output: ListOutputOption = "table",
) -> None:
    """List a tenant's jobs in creation order (from every store group)."""
    from horae.api.schemas import JobOut
    from horae.store import routing

    one_of("--state", state, (s.value for s in JobState))
    fmt = output_format(output, LIST_FORMATS)
    cfg = settings()

    async def go() -> None:
        async with store_groups(cfg.database.url) as store:
            rows = await routing.list_jobs(
                store, tenant, after=None, limit=limit, state=JobState(state) if state else None
            )
        jobs = [JobOut.from_row(r) for r in rows]
        if fmt == "name":
            print_names("job", (j.id for j in jobs))
        elif fmt in ("json", "yaml"):
            print_data([j.model_dump(mode="json") for j in jobs], fmt)
        else:
            from horae.cli.support import console

            table = render(jobs_grid(tenant, jobs, wide=fmt == "wide"))
            console(table if fmt == "wide" else None).print(table)

    run(go())


@jobs_app.command("get")
def jobs_get(job: JobArgument, output: OneOutputOption = "table") -> None:
    """Show a job and its next 5 fire times."""
    ref = JobRef.parse(job)
    fmt = output_format(output, ONE_FORMATS)
    cfg = settings()

    async def go() -> None:
        async with store_groups(cfg.database.url) as store:
            row = await find_job(store, ref)
        _print_job(_job_out(row, with_next_runs=True), fmt)

    run(go())


CatchUpOption = Annotated[
    str | None,
    typer.Option(
        help="What runs of the occurrences missed in a gap (an outage, a pause): Skip,"
        " Latest (default) or All.",
        autocompletion=completes(CatchUpPolicy),
    ),
]
CatchUpWindowOption = Annotated[
    str | None,
    typer.Option(
        help="Only missed occurrences due within this long run, e.g. 90s, 15m, 1h30m"
        " (at most 744h). Default: no limit."
    ),
]


def _spec(
    *,
    task: str,
    cron: str | None,
    tz: str | None,
    run_at: str | None,
    payload: str | None,
    max_attempts: int | None,
    timeout: int | None,
    pause_after_failures: int | None = None,
    catch_up: str | None = None,
    catch_up_window: str | None = None,
    concurrency_policy: str | None = None,
) -> JobSpec:
    """The job spec the options describe, or a one-line error naming the bad option."""
    import pydantic

    from horae.domain.fields import first_error
    from horae.domain.limits import catch_up_window as window_seconds
    from horae.domain.limits import lateness_error, payload_size_error
    from horae.models import CatchUpPolicy, JobSpec

    if (cron is None) == (run_at is None):
        raise fail("exactly one of --cron and --run-at is required")
    one_of("--concurrency-policy", concurrency_policy, (p.value for p in ConcurrencyPolicy))
    if tz is not None and run_at is not None:
        raise fail("--tz: applies to --cron only; give --run-at a UTC offset instead")
    when: datetime | None = None
    if run_at is not None:
        try:
            when = datetime.fromisoformat(run_at)
        except ValueError:
            raise fail(f"--run-at: not an ISO 8601 instant: {run_at!r}") from None
        if when.tzinfo is None:
            raise fail("--run-at: needs a UTC offset, e.g. 2030-01-01T09:00:00Z")
        late = lateness_error(when, starting_deadline_seconds=None, now=datetime.now(UTC))
        if late is not None:
            raise fail(f"--run-at: {late}")
    data: Any = {}
    if payload is not None:
        try:
            data = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise fail(f"--payload: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(data, dict):
            raise fail(f"--payload: must be a JSON object, got {type(data).__name__}")
        error = payload_size_error(data)
        if error is not None:
            raise fail(f"--payload: {error}")
    fields: dict[str, Any] = {
        "task": task,
        "payload": data,
        "run_at": when,
        "cron": cron,
        "time_zone": tz or "UTC",
        "timeout_seconds": timeout,
    }
    if concurrency_policy is not None:
        fields["concurrency_policy"] = concurrency_policy
    if max_attempts is not None:
        fields["retry"] = {"max_attempts": max_attempts}
    if pause_after_failures is not None:
        fields["failure_policy"] = {"pause_after_consecutive_failures": pause_after_failures}
    if catch_up is not None:
        one_of("--catch-up", catch_up, (p.value for p in CatchUpPolicy))
        fields["catch_up"] = catch_up
    if catch_up_window is not None:
        try:
            fields["catch_up_window_seconds"] = window_seconds(catch_up_window)
        except ValueError as exc:
            raise fail(f"--catch-up-window: {exc}") from None
    if (catch_up is not None or catch_up_window is not None) and cron is None:
        raise fail("--catch-up: applies to --cron only (a one-off that was missed runs late)")
    try:
        return JobSpec(**fields)
    except pydantic.ValidationError as exc:
        first = first_error(exc)
        raise fail(f"{_OPTION_OF_FIELD.get(first.top, '--cron')}: {first.reason}") from None


@jobs_app.command("create")
def jobs_create(
    task: Annotated[str, typer.Option(help="Task name, as registered with @task.")],
    cron: Annotated[
        str | None, typer.Option(help="Cron expression (5 fields, 6 with seconds first).")
    ] = None,
    tz: Annotated[str | None, typer.Option("--tz", help="IANA time zone of --cron.")] = None,
    run_at: Annotated[
        str | None, typer.Option(help="Run once at this ISO 8601 instant (with an offset).")
    ] = None,
    payload: Annotated[str | None, typer.Option(help="A JSON object for the handler.")] = None,
    tenant: TenantOption = DEFAULT_TENANT,
    name: Annotated[str | None, typer.Option(help="A name to recognise the job by.")] = None,
    max_attempts: Annotated[
        int | None, typer.Option(help="Attempts before the execution is dead (default 5).")
    ] = None,
    timeout: Annotated[int | None, typer.Option(help="Handler timeout in seconds.")] = None,
    pause_after_failures: Annotated[
        int | None,
        typer.Option(
            help="Pause the job after N executions in a row ended failed, timed out or dead"
            " (1-1000; each counted once its retries are over; a success resets the count)."
        ),
    ] = None,
    catch_up: CatchUpOption = None,
    catch_up_window: CatchUpWindowOption = None,
    concurrency_policy: Annotated[
        str | None,
        typer.Option(
            help="When an occurrence is due while the previous one runs: Allow (both run,"
            " the default), Forbid (skip the new one), Replace (cancel the running one),"
            " BufferOne (the new one waits for it; one due while one waits is skipped).",
            autocompletion=completes(ConcurrencyPolicy),
        ),
    ] = None,
    output: OneOutputOption = "table",
) -> None:
    """Create a job (and its first execution) in one transaction."""
    from horae.models import JobSource
    from horae.store import routing
    from horae.store.new_jobs import NewJob

    spec = _spec(
        task=task,
        cron=cron,
        tz=tz,
        run_at=run_at,
        payload=payload,
        max_attempts=max_attempts,
        timeout=timeout,
        pause_after_failures=pause_after_failures,
        catch_up=catch_up,
        catch_up_window=catch_up_window,
        concurrency_policy=concurrency_policy,
    )
    for option, value in (("--tenant", tenant), ("--name", name)):
        if value is not None and not 1 <= len(value) <= 253:
            raise fail(f"{option}: must be 1 to 253 characters")
    fmt = output_format(output, ONE_FORMATS)
    cfg = settings()

    async def go() -> None:
        new = NewJob(spec=spec, tenant=tenant, source=JobSource.API, name=name)
        async with store_groups(cfg.database.url) as store:
            await routing.create_jobs(store, [new], now=datetime.now(UTC))
            row = await routing.get_job(store, new.job_id)
        _print_job(_job_out(row, with_next_runs=True), fmt)

    run(go())


@jobs_app.command("edit")
def jobs_edit(
    job: JobArgument,
    catch_up: CatchUpOption = None,
    catch_up_window: CatchUpWindowOption = None,
    no_catch_up_window: Annotated[
        bool, typer.Option("--no-catch-up-window", help="Remove the catch-up window.")
    ] = False,
    pause_after_failures: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=1000,
            help="Pause the job after N executions in a row ended failed, timed out or dead.",
        ),
    ] = None,
    no_failure_policy: Annotated[
        bool, typer.Option("--no-failure-policy", help="Remove the failure policy.")
    ] = False,
    output: OneOutputOption = "table",
) -> None:
    """Change a job's catch-up policy or window, or its failure policy (spec version + 1, as
    an API edit: the pending execution is replaced). A ScheduledJob's job is changed in its
    manifest."""
    from horae.domain.limits import catch_up_window as window_seconds
    from horae.errors import Conflict, NotFound
    from horae.models import JobSpec
    from horae.store import jobs as jobs_store
    from horae.store import quotas, routing

    one_of("--catch-up", catch_up, (p.value for p in CatchUpPolicy))
    if catch_up_window is not None and no_catch_up_window:
        raise fail("--catch-up-window: cannot be combined with --no-catch-up-window")
    changes: dict[str, Any] = {}
    if catch_up is not None:
        changes["catch_up"] = CatchUpPolicy(catch_up)
    if catch_up_window is not None:
        try:
            changes["catch_up_window_seconds"] = window_seconds(catch_up_window)
        except ValueError as exc:
            raise fail(f"--catch-up-window: {exc}") from None
    if no_catch_up_window:
        changes["catch_up_window_seconds"] = None
    if pause_after_failures is not None and no_failure_policy:
        raise fail("--pause-after-failures: cannot be combined with --no-failure-policy")
    if pause_after_failures is not None:
        changes["failure_policy"] = {"pause_after_consecutive_failures": pause_after_failures}
    if no_failure_policy:
        changes["failure_policy"] = None
    if not changes:
        raise fail(
            "nothing to change: give --catch-up, --catch-up-window, --no-catch-up-window,"
            " --pause-after-failures or --no-failure-policy"
        )
    ref = JobRef.parse(job)
    fmt = output_format(output, ONE_FORMATS)
    cfg = settings()

    async def go() -> None:
        async with store_groups(cfg.database.url) as store:
            row = await find_job(store, ref)
            if row.cron is None and {"catch_up", "catch_up_window_seconds"} & changes.keys():
                raise fail(f"--catch-up: job {row.id} is a one-off; catch-up applies to cron jobs")
            spec = JobSpec.model_validate(row.spec.model_dump() | changes)
            group = store.catalog.group_of(row.shard)
            elsewhere = await quotas.elsewhere(store, group, [row.tenant])
            try:
                await routing.on_job(
                    store,
                    row.id,
                    lambda conn: jobs_store.edit_job(
                        conn, row.id, spec, now=datetime.now(UTC), elsewhere=elsewhere
                    ),
                )
            except NotFound:
                raise fail(f"job {ref.text} not found", 1) from None
            except Conflict as exc:
                raise fail(str(exc), 1) from None
            edited = await routing.get_job(store, row.id)
        _print_job(_job_out(edited, with_next_runs=True), fmt)

    run(go())


@jobs_app.command("pause")
def jobs_pause(
    job: JobArgument,
    reason: Annotated[
        str | None,
        typer.Option(
            help="Why (shown by `jobs get` and the API until it is resumed; at most 500"
            " characters). Pausing a paused job replaces it."
        ),
    ] = None,
) -> None:
    """Pause a job: its pending executions are cancelled until it is resumed."""
    from horae.domain.limits import pause_reason_error
    from horae.store import jobs as jobs_store

    if reason is not None:
        error = "cannot be empty" if not reason else pause_reason_error(reason)
        if error is not None:
            raise fail(f"--reason: {error}")

    async def pause(conn: Conn, job_id: uuid.UUID, *, now: datetime) -> None:
        await jobs_store.pause_job(conn, job_id, now=now, reason=reason)

    _transition(job, "paused", pause)


@jobs_app.command("resume")
def jobs_resume(job: JobArgument) -> None:
    """Resume a paused job from now (one its failure policy paused counts its failures
    afresh); missed occurrences follow its catch-up policy."""
    from horae.store import jobs as jobs_store

    _transition(job, "resumed", jobs_store.resume_job)


@jobs_app.command("trigger")
def jobs_trigger(job: JobArgument) -> None:
    """Run an active job once now, outside its schedule: a manual execution (as the
    HTTP API's :trigger, or a ScheduledJob's horae.dev/trigger annotation)."""
    from horae.store import jobs as jobs_store

    async def trigger(conn: Conn, job_id: uuid.UUID, *, now: datetime) -> str:
        execution_id = await jobs_store.trigger_job(conn, job_id, now=now)
        return f"triggered: execution {execution_id}"

    _transition(job, None, trigger)


@jobs_app.command("cancel")
def jobs_cancel(job: JobArgument) -> None:
    """Cancel a job for good: pending executions are cancelled, history is kept."""
    from horae.errors import NotFound
    from horae.store import jobs as jobs_store
    from horae.store import reads

    async def cancel(conn: Conn, job_id: uuid.UUID, *, now: datetime) -> str:
        if await jobs_store.cancel_job(conn, job_id, now=now):
            return "cancelled"
        if await reads.find_job(conn, job_id) is None:
            raise NotFound(f"job {job} not found")  # (or moved: tried in its new group)
        return "was already cancelled"

    _transition(job, None, cancel)


def _transition(job: str, done: str | None, operation: Callable[..., Awaitable[object]]) -> None:
    """Run one lifecycle operation on JOB, in its store group; `done` is what to report
    (None: what it returns)."""
    from horae.errors import Conflict, NotFound
    from horae.store import routing

    ref = JobRef.parse(job)
    cfg = settings()

    async def go() -> None:
        async with store_groups(cfg.database.url) as store:
            job_id = await ref.resolve(store)
            if job_id is None:
                raise fail(f"job {ref.text} not found", 1)
            try:
                result = await routing.on_job(
                    store, job_id, lambda conn: operation(conn, job_id, now=datetime.now(UTC))
                )
            except NotFound:
                raise fail(f"job {ref.text} not found", 1) from None
            except Conflict as exc:
                raise fail(str(exc), 1) from None
        typer.echo(f"job {job_id} {done or result}")

    run(go())

"""The `horae` command: run components, migrate, inspect."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Coroutine
from typing import Annotated, Any

import typer

from horae import logs
from horae.config import Settings
from horae.errors import ConfigError

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except ConfigError as exc:
        typer.echo(f"horae: {exc}", err=True)
        raise typer.Exit(2) from None


def _run(coro: Coroutine[Any, Any, None]) -> None:
    logs.setup(os.environ.get("HORAE_LOG_LEVEL", "INFO"))
    try:
        asyncio.run(coro)
    except KeyboardInterrupt:
        pass


@app.command()
def migrate() -> None:
    """Apply schema migrations and create the execution partitions ahead."""
    from horae.store.migrate import migrate as do_migrate

    settings = _settings()

    async def go() -> None:
        applied = await do_migrate(
            settings.database.url,
            ahead_days=settings.database.partitions_ahead_days,
            retention_days=settings.database.retention_days,
        )
        typer.echo(
            f"applied {len(applied)} migration(s)" + (f": {', '.join(applied)}" if applied else "")
        )

    _run(go())


@app.command()
def scheduler() -> None:
    """Run a scheduler replica: shard Leases, preload, dispatch."""
    from horae.scheduler.main import run

    _run(run(_settings()))


@app.command()
def worker(
    tasks: Annotated[str, typer.Option(help="Module (or .py file) with the @task handlers.")],
    pool: Annotated[str | None, typer.Option(help="WorkerPool whose queue to consume.")] = None,
    concurrency: Annotated[int | None, typer.Option(min=1, help="Handlers run at once.")] = None,
) -> None:
    """Run a worker: consume, claim, run handlers, record outcomes."""
    from horae.worker.runtime import run

    if pool:
        os.environ["HORAE_POOL"] = pool
    if concurrency:
        os.environ["HORAE_CONCURRENCY"] = str(concurrency)
    _run(run(_settings(), tasks))


@app.command()
def operator() -> None:
    """Run the Kubernetes operator (ScheduledJob reconciliation and status)."""
    from horae.operator.main import run

    _run(run(_settings()))


@app.command()
def api(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8080,
    workers: Annotated[int, typer.Option(min=1, max=64, help="Server processes.")] = 1,
) -> None:
    """Serve the HTTP job API (auth: Kubernetes tokens; HORAE_API_TOKENS_FILE for local dev)."""
    import uvicorn

    _settings()  # fail fast with a one-line error on bad settings
    uvicorn.run(
        "horae.api.app:app_from_env", factory=True, host=host, port=port, workers=workers,
        log_level="warning", access_log=False,
    )  # fmt: skip


schedule_app = typer.Typer(no_args_is_help=True, help="Inspect schedules.")
app.add_typer(schedule_app, name="schedule")
tenants_app = typer.Typer(no_args_is_help=True, help="Tenants and their limits.")
app.add_typer(tenants_app, name="tenants")


def _bad_input(message: str) -> typer.Exit:
    typer.echo(f"horae: {message}", err=True)
    return typer.Exit(2)


@schedule_app.command("preview")
def schedule_preview(
    cron: Annotated[str, typer.Argument(help="Cron expression (5 fields, 6 with seconds first).")],
    tz: Annotated[str, typer.Option("--tz", help="IANA time zone.")] = "UTC",
    count: Annotated[int, typer.Option("-n", "--count", help="How many fire times.")] = 10,
    after: Annotated[str | None, typer.Option(help="Start after this ISO 8601 instant.")] = None,
) -> None:
    """Print the next fire times of a cron expression (UTC and local), creating nothing."""
    from datetime import UTC, datetime
    from zoneinfo import ZoneInfo

    import pydantic

    from horae.models import JobSpec
    from horae.schedule import next_fire_times

    if not 1 <= count <= 100:
        raise _bad_input(f"--count must be between 1 and 100, got {count}")
    try:
        JobSpec(task="preview", cron=cron, time_zone=tz)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        field = {"cron": "CRON", "time_zone": "--tz"}.get(str(first["loc"][0]), "CRON")
        raise _bad_input(f"{field}: {first['msg'].removeprefix('Value error, ')}") from None
    start = datetime.now(UTC)
    if after is not None:
        try:
            start = datetime.fromisoformat(after)
        except ValueError:
            raise _bad_input(f"--after: not an ISO 8601 instant: {after!r}") from None
        if start.tzinfo is None:
            raise _bad_input("--after: needs a UTC offset, e.g. 2030-01-01T00:00:00Z")
    zone = ZoneInfo(tz)
    for fire in next_fire_times(run_at=None, cron=cron, time_zone=tz, after=start, count=count):
        local = fire.astimezone(zone)
        typer.echo(f"{fire.strftime('%Y-%m-%dT%H:%M:%SZ')}  {local.isoformat()}")


@tenants_app.command("set")
def tenants_set(
    tenant: Annotated[str, typer.Argument(help="Tenant (namespace) name.")],
    max_running: Annotated[
        int | None, typer.Option(help="Concurrently running executions; omit for no limit.")
    ] = None,
) -> None:
    """Set a tenant's limit of concurrently running executions."""
    from horae.store import jobs as jobs_store
    from horae.store.db import connect

    if max_running is not None and max_running < 1:
        raise _bad_input(f"--max-running must be >= 1, got {max_running}")
    settings = _settings()

    async def go() -> None:
        conn = await connect(settings.database.url)
        try:
            row = await jobs_store.set_tenant_limit(conn, tenant, max_running)
            typer.echo(f"{row['name']}: max_running={row['max_running']} running={row['running']}")
        finally:
            await conn.close()

    _run(go())


@tenants_app.command("ls")
def tenants_ls() -> None:
    """List tenants with their limits and running counts."""
    from horae.store import jobs as jobs_store
    from horae.store.db import connect

    settings = _settings()

    async def go() -> None:
        conn = await connect(settings.database.url)
        try:
            for row in await jobs_store.list_tenants(conn):
                limit = row["max_running"] if row["max_running"] is not None else "-"
                typer.echo(f"{row['name']}\tmax_running={limit}\trunning={row['running']}")
        finally:
            await conn.close()

    _run(go())


def _resolve_job_ref(ref: str) -> tuple[uuid.UUID | None, str | None, str | None]:
    try:
        return uuid.UUID(ref), None, None
    except ValueError:
        pass
    if ref.count("/") == 1 and all(ref.split("/")):
        namespace, name = ref.split("/")
        return None, namespace, name
    raise _bad_input(f"JOB must be a job id or NAMESPACE/NAME, got {ref!r}")


@app.command()
def executions(
    jobs: Annotated[list[str], typer.Argument(help="Job ids, or NAMESPACE/NAME of ScheduledJobs.")],
    status: Annotated[str | None, typer.Option(help="Only executions with this status.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Newest N per job.")] = 20,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Keep refreshing.")] = False,
    for_seconds: Annotated[
        float | None, typer.Option("--for", min=0, help="With --watch: stop after N seconds.")
    ] = None,
) -> None:
    """Show jobs' executions, newest first."""
    from rich.console import Console
    from rich.live import Live
    from rich.table import Table

    from horae.models import ExecutionStatus
    from horae.store import executions as executions_store
    from horae.store import jobs as jobs_store
    from horae.store.db import connect

    refs = [(ref, *_resolve_job_ref(ref)) for ref in jobs]
    try:
        wanted = ExecutionStatus(status) if status else None
    except ValueError:
        allowed = ", ".join(s.value for s in ExecutionStatus)
        typer.echo(f"horae: --status must be one of {allowed}; got {status!r}", err=True)
        raise typer.Exit(2) from None
    settings = _settings()

    def table(rows: list[tuple[str, Any]]) -> Table:
        t = Table(title="executions", title_justify="left")
        for col in ("JOB", "EXECUTION", "ATTEMPT", "STATUS", "DUE", "START LAG", "ERROR"):
            t.add_column(col, no_wrap=col != "ERROR")
        for ref, r in rows:
            lag = (
                f"{(r['started_at'] - r['due_at']).total_seconds() * 1000:.0f}ms"
                if r["started_at"]
                else ""
            )
            t.add_row(
                ref, str(r["id"])[:8], str(r["attempt"]), r["status"],
                r["due_at"].strftime("%H:%M:%S"),
                lag, (r["error_message"] or "")[:50],
            )  # fmt: skip
        return t

    async def go() -> None:
        conn = await connect(settings.database.url)
        try:

            async def fetch() -> list[tuple[str, Any]]:
                rows: list[tuple[str, Any]] = []
                for ref, job_id, namespace, name in refs:
                    resolved = job_id or await jobs_store.find_live_crd_job(
                        conn, namespace or "", name or ""
                    )
                    if resolved is None:
                        continue
                    found = await executions_store.for_job(
                        conn, resolved, status=wanted, limit=limit
                    )
                    rows.extend((ref, r) for r in found)
                rows.sort(key=lambda x: x[1]["due_at"], reverse=True)
                return rows

            rows = await fetch()
            console = Console() if sys.stdout.isatty() else Console(width=140)
            if not watch:
                console.print(table(rows))
                return
            loop = asyncio.get_running_loop()
            deadline = loop.time() + for_seconds if for_seconds is not None else None
            with Live(table(rows), console=console, refresh_per_second=4) as live:
                while deadline is None or loop.time() < deadline:
                    await asyncio.sleep(0.5)
                    live.update(table(await fetch()))
        finally:
            await conn.close()

    _run(go())


def main() -> None:
    sys.exit(app())

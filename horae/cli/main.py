"""The `horae` command: run components, migrate, inspect."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from horae.cli import views
from horae.cli.backfills import backfills_app
from horae.cli.explain import explain
from horae.cli.jobs import jobs_app
from horae.cli.store import store_app
from horae.cli.support import console, fail
from horae.cli.support import run as _run
from horae.cli.support import settings as _settings

# Typer's --install-completion and --show-completion: commands, options and the values of
# -o, --status and --state complete in bash, zsh, fish and PowerShell.
app = typer.Typer(no_args_is_help=True, help=__doc__)


@app.command()
def migrate(
    shards: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=4096,
            help="Virtual shards of a new installation (default 64; env HORAE_SHARDS)."
            " Fixed once the installation exists: a different value is refused.",
        ),
    ] = None,
    retention_days: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Days of execution history kept (a new installation: 30; env"
            " HORAE_RETENTION_DAYS). Unset keeps the installation's.",
        ),
    ] = None,
) -> None:
    """Apply schema migrations, record the installation's settings, create the execution
    partitions ahead and drop those past the installation's retention."""
    from horae.store.migrate import migrate_installation

    settings = _settings()

    async def go() -> None:
        # A spinner on a terminal (migrations and partitions can take a while on a big
        # store); nothing extra when the output is piped.
        with console().status("applying migrations and creating partitions…"):
            done = await migrate_installation(
                settings.database.url,
                shards=shards or settings.database.shards,
                retention_days=retention_days or settings.database.retention_days,
                ahead_days=settings.database.partitions_ahead_days,
            )
        several = len(done.groups) > 1
        for group in done.groups:
            applied = group.applied
            typer.echo(
                (f"store group {group.group}: " if several else "")
                + f"applied {len(applied)} migration(s)"
                + (f": {', '.join(applied)}" if applied else "")
                + (f" ({group.dropped} partition(s) dropped)" if several else "")
            )
        typer.echo(
            f"installation: {done.installation.shards} shards,"
            f" {done.installation.retention_days} days of history kept"
            + ("" if several else f" ({done.dropped} partition(s) dropped)")
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
    """Serve the HTTP job API (auth: Kubernetes tokens when there is a cluster;
    HORAE_API_TOKENS_FILE for local development)."""
    import shutil

    import uvicorn

    from horae.api.app import auth_plan
    from horae.api.metering import share_between_processes
    from horae.errors import ConfigError

    _settings()  # fail fast with a one-line error on bad settings
    try:
        plan = auth_plan(os.environ)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    typer.echo(f"horae api on {host}:{port}: {plan.describe()}", err=True)
    # Several processes behind one port share their metrics and heartbeats (metering.py).
    shared = share_between_processes(workers)
    try:
        uvicorn.run(
            "horae.api.app:app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level="warning",
            access_log=False,
        )
    finally:
        if shared is not None:
            shutil.rmtree(shared, ignore_errors=True)


@app.command("aggregated-api")
def aggregated_api() -> None:
    """Serve `kubectl get executions` (group runs.horae.dev) from the store, behind the
    cluster's aggregation layer (an APIService). HTTPS with a client certificate required:
    HORAE_TLS_CERT_FILE, HORAE_TLS_KEY_FILE; HORAE_AGGREGATED_PORT (8443)."""
    from horae.aggregated.server import ServerSettings, run
    from horae.errors import ConfigError

    settings = _settings()
    try:
        server = ServerSettings.from_env()
    except ConfigError as exc:
        raise fail(str(exc)) from None
    _run(run(settings, server))


@app.command()
def dev(
    tasks: Annotated[str, typer.Option(help="Module (or .py file) with the @task handlers.")],
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port of the HTTP API.")] = 8080,
) -> None:
    """Local development: migrate, then run the API, a scheduler, a worker and the operator
    (each a child process) until Ctrl-C or SIGTERM."""
    from horae import dev as devrun
    from horae.store.migrate import migrate_installation

    settings = _settings()
    # Ample for the worker's graceful stop, whose own grace period comes first.
    grace = settings.worker.shutdown_grace.total_seconds() + 5
    code = 0

    async def go() -> None:
        nonlocal code
        await migrate_installation(
            settings.database.url,
            shards=settings.database.shards,
            retention_days=settings.database.retention_days,
            ahead_days=settings.database.partitions_ahead_days,
        )
        code = await devrun.supervise(devrun.commands(tasks=tasks, port=port), grace=grace)

    _run(go())
    raise typer.Exit(code)


# After the components' commands, in the order `horae --help` lists them.
app.add_typer(jobs_app, name="jobs")
app.add_typer(store_app, name="store")
app.add_typer(backfills_app, name="backfills")
views.register(app)
app.command()(explain)


def main() -> None:
    """Run the command; a usage error (unknown option, bad value) is one line, exit code 2."""
    # Typer vendors click and does not re-export this one: the help shown for a bare group.
    from typer._click.exceptions import NoArgsIsHelpError

    try:
        code = app(standalone_mode=False)
    except NoArgsIsHelpError as exc:
        exc.show()
        code = exc.exit_code
    except typer.TyperException as exc:
        typer.echo(f"horae: {exc.format_message()}", err=True)
        code = exc.exit_code
    except typer.Abort:
        code = 130
    sys.exit(code or 0)

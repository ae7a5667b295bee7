"""The `horae` command: run components, migrate, inspect."""

from __future__ import annotations

import asyncio
import os
import sys
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


def main() -> None:
    sys.exit(app())

"""`horae store`: the store groups (PostgreSQL primaries) and the shards each holds: add a
group, move shards online, even them out, and see each group's rows and lag."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from horae.cli.support import OutputOption, console, fail, output_format, print_data
from horae.cli.support import run as _run
from horae.cli.support import settings as _settings

if TYPE_CHECKING:
    from horae.store.moves import GroupStatus, Moved

store_app = typer.Typer(no_args_is_help=True, help="Store groups and the shards they hold.")


@store_app.command("add-group")
def add_group(
    name: Annotated[str, typer.Argument(help="The group's name (lowercase letters, digits, -).")],
    url: Annotated[str, typer.Argument(help="postgresql:// URL of its database (migrated now).")],
) -> None:
    """Migrate a database as a new store group and add it to the catalog, holding no shards
    yet (`horae store move-shards` or `rebalance` gives it some)."""
    import re

    from horae.store.groups import address_of, redact
    from horae.store.moves import add_group as add

    if not re.fullmatch(r"[a-z]([a-z0-9-]{0,30}[a-z0-9])?", name):
        raise fail(f"NAME {name!r}: lowercase letters, digits and '-', 1-32 characters")
    try:
        address_of(url)
    except Exception as exc:
        raise fail(str(exc)) from None
    settings = _settings()

    async def go() -> None:
        done = await add(settings.database.url, name, url)
        applied = f"{len(done.applied)} migration(s) applied"
        typer.echo(f"store group {name} added ({redact(url)}): {applied}, no shards yet")

    _run(go())


@store_app.command("move-shards")
def move_shards(
    shards: Annotated[list[int], typer.Argument(help="Shard numbers to move.")],
    to: Annotated[str, typer.Option("--to", help="The group to move them to.")],
) -> None:
    """Move shards, with their jobs and live executions, to another group while Horae runs:
    their dispatch and claims pause for the copy; history stays readable where it was."""
    from horae.store.moves import move_shards as move

    settings = _settings()

    async def go() -> None:
        for moved in await move(settings.database.url, shards, to):
            _report(moved)

    _run(go())


@store_app.command("rebalance")
def rebalance(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the moves only.")] = False,
) -> None:
    """Even out the shards over the groups with the fewest moves."""
    from horae.store.db import session
    from horae.store.groups import read_catalog
    from horae.store.moves import move_shards as move
    from horae.store.moves import rebalanced

    settings = _settings()

    async def go() -> None:
        async with session(settings.database.url) as conn:
            plan = rebalanced(await read_catalog(conn))
        if not plan:
            typer.echo("the shards are even over the groups already")
            return
        for group in sorted(set(plan.values())):
            shards = sorted(s for s, g in plan.items() if g == group)
            if dry_run:
                typer.echo(f"would move shards {_ranges(shards)} to {group}")
                continue
            for moved in await move(settings.database.url, shards, group):
                _report(moved)

    _run(go())


@store_app.command("status")
def status(output: OutputOption = "table") -> None:
    """Each group: where it is, its shards, jobs, live executions, history and dispatch lag."""
    from horae.store.moves import store_status

    fmt = output_format(output)
    settings = _settings()

    async def go() -> None:
        catalog, groups = await store_status(settings.database.url)
        if fmt != "table":
            print_data(
                {"catalogVersion": catalog.version, "groups": [_data(g) for g in groups]}, fmt
            )
            return
        console().print(_table(catalog.version, groups))
        if any(g.error for g in groups):
            raise typer.Exit(1)

    _run(go())


def _report(moved: Moved) -> None:
    typer.echo(
        f"moved shards {_ranges(moved.shards)} from {moved.source} to {moved.target}:"
        f" {moved.jobs} jobs, {moved.executions} live executions,"
        f" paused {moved.paused.total_seconds():.2f}s"
    )


def _ranges(shards: list[int]) -> str:
    """1,2,3,7 -> "1-3,7"."""
    out: list[str] = []
    for s in sorted(shards):
        if out and out[-1].split("-")[-1] == str(s - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{s}"
        else:
            out.append(str(s))
    return ",".join(out)


def _data(g: GroupStatus) -> dict[str, object]:
    return {
        "name": g.group,
        "address": g.address or "(the catalog's database)",
        "shards": g.shards,
        "jobs": g.jobs,
        "liveExecutions": g.live,
        "executionsEstimate": g.executions,
        "lagSeconds": None if g.lag is None else round(g.lag.total_seconds(), 3),
        "bytes": g.bytes,
        "error": g.error,
    }


def _table(version: int, groups: list[GroupStatus]) -> object:
    from rich.table import Table

    t = Table(title=f"store groups (catalog version {version})", title_justify="left")
    for col in ("GROUP", "ADDRESS", "SHARDS", "JOBS", "LIVE", "EXECUTIONS", "LAG", "SIZE"):
        t.add_column(col, no_wrap=True)
    for g in groups:
        shards = f"{len(g.shards)} ({_ranges(g.shards)})" if g.shards else "0"
        if g.error:
            t.add_row(g.group, g.address or "(catalog)", shards, f"unreachable: {g.error}")
            continue
        lag = f"{g.lag.total_seconds():.1f}s" if g.lag is not None else ""
        size = f"{(g.bytes or 0) / 2**20:.0f} MiB"
        row = (g.jobs, g.live, g.executions)
        t.add_row(g.group, g.address or "(catalog)", shards, *map(str, row), lag, size)
    return t

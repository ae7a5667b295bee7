"""What the `horae` subcommands share: settings, the event loop, one-line errors, the
`-o` output formats (`table|wide|name|json|yaml` for resources), the store (every group's
pool) and job references.

Only the command line uses this module; nothing here parses arguments itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from horae import logs
from horae.config import Settings
from horae.errors import ConfigError, PartFailed, QuotaExceeded, StoreError

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from horae.store.db import Conn
    from horae.store.groups import Store
    from horae.store.rows import JobRow


def completes(values: Iterable[str]) -> Callable[[str], list[str]]:
    """A shell-completion callback offering `values` (those that begin what is typed)."""
    choices = list(values)

    def complete(incomplete: str) -> list[str]:
        return [v for v in choices if v.startswith(incomplete)]

    return complete


FORMATS = ("table", "json", "yaml")
"""The outputs of a command that prints data rather than resources (a preview, a status)."""
ONE_FORMATS = ("table", "name", "json", "yaml")
"""The outputs of a command that prints one resource (`name`: KIND/ID, as kubectl's)."""
LIST_FORMATS = ("table", "wide", "name", "json", "yaml")
"""The outputs of a command that lists resources (`wide`: more columns, as kubectl's)."""

OutputOption = Annotated[
    str,
    typer.Option(
        "-o",
        "--output",
        help="table (for people), json or yaml (for scripts).",
        autocompletion=completes(FORMATS),
    ),
]
OneOutputOption = Annotated[
    str,
    typer.Option(
        "-o",
        "--output",
        help="table (for people); name (KIND/ID), json or yaml (for scripts).",
        autocompletion=completes(ONE_FORMATS),
    ),
]
ListOutputOption = Annotated[
    str,
    typer.Option(
        "-o",
        "--output",
        help="table, or wide with more columns (for people); name (KIND/ID, one a line),"
        " json or yaml (for scripts).",
        autocompletion=completes(LIST_FORMATS),
    ),
]


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print `horae: message` as one line on stderr; raise the result to exit with `code`
    (2: bad input or settings, 1: the operation itself failed)."""
    typer.echo(f"horae: {message}", err=True)
    return typer.Exit(code)


def one_of(option: str, value: str | None, allowed: Iterable[str]) -> None:
    allowed = list(allowed)
    if value is not None and value not in allowed:
        raise fail(f"{option} must be one of {', '.join(allowed)}; got {value!r}")


def output_format(value: str, allowed: Sequence[str] = FORMATS) -> str:
    one_of("-o/--output", value, allowed)
    return value


def print_names(kind: str, ids: Iterable[object]) -> None:
    """`-o name`: `kind/id`, one a line, as kubectl prints them (for xargs and loops; the
    commands that take a job or an execution take these too)."""
    for i in ids:
        typer.echo(f"{kind}/{i}")


def settings() -> Settings:
    try:
        return Settings.from_env()
    except ConfigError as exc:
        raise fail(str(exc)) from None


def run(coro: Coroutine[Any, Any, None]) -> None:
    logs.setup(os.environ.get("HORAE_LOG_LEVEL", "INFO"))
    try:
        asyncio.run(coro)
    except KeyboardInterrupt:
        pass
    except ConfigError as exc:  # a setting the database contradicts, or no installation yet
        raise fail(str(exc)) from None
    except PartFailed as exc:  # logged with its traceback when it happened
        raise fail(str(exc), 1) from None
    except QuotaExceeded as exc:  # the operation failed: the tenant is at a quota
        raise fail(str(exc), 1) from None
    except StoreError as exc:  # the operation failed: a database refused it or is down
        raise fail(str(exc), 1) from None


def console(whole: RenderableType | None = None) -> Console:
    """Where to print for people: the terminal, or 140 columns when piped (not 80); wider
    when `whole` (a wide table) needs it, which is then printed uncut, its lines longer than
    the terminal's, as kubectl's `-o wide`."""
    from rich.console import Console

    out = Console() if sys.stdout.isatty() else Console(width=140)
    if whole is not None:
        unbounded = out.options.update_width(100_000)
        if (needed := out.measure(whole, options=unbounded).maximum) > out.width:
            out = Console(width=needed)
    return out


def print_data(data: Any, fmt: str) -> None:
    """Print JSON-compatible `data` (dicts, lists, strings, numbers) as json or yaml."""
    if fmt == "json":
        typer.echo(json.dumps(data, indent=2))
    else:
        import yaml

        typer.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), nl=False)


@asynccontextmanager
async def database(url: str) -> AsyncIterator[Conn]:
    """One connection for one command; an unreachable database is a one-line error."""
    from horae.errors import StoreError
    from horae.store.db import session

    opened = False
    try:
        async with session(url) as conn:
            opened = True
            yield conn
    except StoreError as exc:
        if opened:
            raise
        cause = exc.__cause__ or exc
        raise fail(f"cannot use the database at HORAE_DATABASE_URL: {cause}", 1) from None


@asynccontextmanager
async def store_groups(url: str) -> AsyncIterator[Store]:
    """The store for one command: every group's pool (two connections at most each), routed
    by the catalog in the database `url` names; an unreachable database is a one-line
    error."""
    from horae.errors import StoreError
    from horae.store.groups import Store

    try:
        store = await Store.open(url, size=2)
    except StoreError as exc:
        cause = exc.__cause__ or exc
        raise fail(f"cannot use the database at HORAE_DATABASE_URL: {cause}", 1) from None
    try:
        yield store
    finally:
        await store.close()


@dataclass(frozen=True)
class JobRef:
    """A job named on the command line: its id (also as `job/ID`, what `-o name` prints),
    or NAMESPACE/NAME of its ScheduledJob."""

    text: str
    job_id: uuid.UUID | None = None
    namespace: str = ""
    name: str = ""

    @classmethod
    def parse(cls, text: str) -> JobRef:
        try:
            job_id = uuid.UUID(text.removeprefix("job/"))
        except ValueError:
            pass
        else:
            return cls(str(job_id), job_id=job_id)
        if text.count("/") == 1 and all(text.split("/")):
            namespace, name = text.split("/")
            return cls(text, namespace=namespace, name=name)
        raise fail(f"JOB must be a job id or NAMESPACE/NAME, got {text!r}")

    async def resolve(self, store: Store) -> uuid.UUID | None:
        """The job id; for NAMESPACE/NAME the ScheduledJob's live (not cancelled) job, in
        whichever store group holds it."""
        from horae.store import routing

        if self.job_id is not None:
            return self.job_id
        return await routing.find_live_crd_job(store, self.namespace, self.name)


async def find_job(store: Store, ref: JobRef) -> JobRow:
    """The job `ref` names, from its store group; an unknown job is a one-line error and
    exit code 1."""
    from horae.errors import NotFound
    from horae.store import routing

    job_id = await ref.resolve(store)
    try:
        if job_id is None:
            raise NotFound(ref.text)
        return await routing.get_job(store, job_id)
    except NotFound:
        raise fail(f"job {ref.text} not found", 1) from None

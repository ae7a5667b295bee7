"""A pydantic validation error as the field it names and what is wrong with it: how every
entry point tells a caller which part of the input to fix, in the caller's spelling
(`run_at` in the API, `spec.runAt` for a ScheduledJob, `--run-at` on the command line)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pydantic

VALUE_ERROR_PREFIX = "Value error, "
"""What pydantic puts before the text of a ValueError raised by a validator."""


def field_path(
    loc: Iterable[int | str],
    *,
    spell: Callable[[str], str] = str,
    under: str | None = None,
    default: str = "body",
) -> str:
    """A pydantic location as a dotted path, each part spelt by `spell` (`retry` ->
    `retryPolicy`), below `under` when given. An empty location (the model as a whole) is
    `under`, or else `default`."""
    parts = [spell(str(part)) for part in loc]
    if under is not None:
        parts.insert(0, under)
    return ".".join(parts) or default


@dataclass(frozen=True)
class FieldError:
    """One error of a validation: where, as pydantic locates it, and why."""

    loc: tuple[int | str, ...]
    message: str
    """pydantic's message, as it words it (`Value error, …` for a validator's ValueError)."""

    @property
    def top(self) -> str:
        """The top-level field named ("" for the model as a whole)."""
        return str(self.loc[0]) if self.loc else ""

    @property
    def reason(self) -> str:
        """The message without pydantic's `Value error, ` prefix."""
        return self.message.removeprefix(VALUE_ERROR_PREFIX)

    def path(
        self,
        *,
        spell: Callable[[str], str] = str,
        under: str | None = None,
        default: str = "body",
    ) -> str:
        """The location as a dotted path (`field_path`)."""
        return field_path(self.loc, spell=spell, under=under, default=default)


def first_error(exc: pydantic.ValidationError) -> FieldError:
    """The first error of `exc`: the one an entry point reports."""
    first = exc.errors()[0]
    return FieldError(loc=tuple(first["loc"]), message=str(first["msg"]))

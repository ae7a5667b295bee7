"""Execution ids on the command line: as the tables show them, and as the commands read
them.

An execution id is a UUIDv7 (`store.scheduling.new_execution_id`): 12 hex digits of the
millisecond it was made, then random ones. Its first 8 digits change only every 65 s, so
the runs of a job a few seconds apart all begin alike; its first 12 tell apart any two made
in different milliseconds, and are what an Execution resource's name ends with
(`<job>-<12 digits>`). The tables show those 12, more where two rows shown share them.

A command taking an execution reads its full id, `execution/ID` (what `-o name` prints),
or any 8 or more of its leading hex digits that no other execution in the store begins
with. Leading digits, not trailing ones: the ids they begin are a range of the executions'
primary key, one index look-up per partition however large the history.
"""

from __future__ import annotations

import string
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from horae.cli.support import fail

if TYPE_CHECKING:
    from horae.store.groups import Store

SHOWN = 12
"""Hex digits a table shows of an execution id at least: its millisecond."""
FEWEST = 8
"""Fewest leading hex digits a command accepts for an execution."""
LISTED = 5
"""Candidates an ambiguous short id's error names."""


def _common(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def short_ids(ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, str]:
    """Each id as its leading hex digits: `SHOWN`, or as many more as it takes to differ
    from every other of `ids`."""
    digits = sorted({i.hex for i in ids})
    shown = {}
    for k, hexes in enumerate(digits):
        neighbours = digits[max(k - 1, 0) : k] + digits[k + 1 : k + 2]  # sorted: the closest
        length = max([SHOWN, *(_common(hexes, n) + 1 for n in neighbours)])
        shown[uuid.UUID(hexes)] = hexes[:length]
    return shown


@dataclass(frozen=True)
class ExecutionRef:
    """An execution named on the command line: the range of ids its digits begin (one id
    when given in full)."""

    text: str
    low: uuid.UUID
    high: uuid.UUID

    @classmethod
    def parse(cls, text: str) -> ExecutionRef:
        given = text.removeprefix("execution/")
        try:
            full = uuid.UUID(given)
        except ValueError:
            pass
        else:
            return cls(str(full), full, full)
        digits = given.replace("-", "").lower()
        if not FEWEST <= len(digits) < 32 or not set(digits) <= set(string.hexdigits):
            raise fail(
                f"EXECUTION must be an execution id or its first {FEWEST} or more hex digits"
                f" (as `horae executions` shows it), got {text!r}"
            )
        return cls(digits, uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f")))

    async def resolve(self, store: Store) -> uuid.UUID:
        """The one execution id this names, from whichever store groups hold it; none, or
        several, is a one-line error and exit code 1."""
        from horae.store import routing

        if self.low == self.high:
            return self.low
        found = await routing.execution_ids_in_range(store, self.low, self.high, LISTED + 1)
        if not found:
            raise fail(f"execution {self.text} not found", 1)
        if len(found) > 1:
            many = f"{LISTED} or more" if len(found) > LISTED else str(len(found))
            named = ", ".join(short_ids(found[:LISTED]).values())
            raise fail(
                f"execution {self.text} is ambiguous: {many} executions begin so ({named});"
                " give more of its digits",
                1,
            )
        return found[0]

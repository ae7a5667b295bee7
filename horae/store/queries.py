"""Named SQL queries, loaded once from the `*.sql` files beside this module.

Each query sits under a `-- name: NAME` header followed by a one-line `--`
description. Only these strings reach the driver: SQL is never built from
pieces in Python.
"""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def _load() -> dict[str, str]:
    queries: dict[str, str] = {}
    for entry in sorted(resources.files(__package__).iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        text = entry.read_text(encoding="utf-8")
        parts = _HEADER.split(text)
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in queries:
                raise RuntimeError(f"query {name!r} defined twice ({entry.name})")
            queries[name] = body.strip()
    return queries


Q: dict[str, str] = _load()
"""Every named query, by name."""

"""Reading the handlers' invocation log (tests/e2e/tasks.py writes it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def invocations(path: Path, event: str = "start") -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["event"] == event]

from __future__ import annotations

import re
from pathlib import Path

from horae.store.queries import Q

HORAE = Path(__file__).resolve().parents[3] / "horae"


def test_every_query_used_in_the_code_is_defined_and_described() -> None:
    used = set()
    for path in HORAE.rglob("*.py"):
        used |= set(re.findall(r'Q\["([a-z_0-9]+)"\]', path.read_text()))
    assert used, "no queries found: the scan is broken"
    assert used <= set(Q), f"undefined queries: {sorted(used - set(Q))}"
    unused = set(Q) - used
    assert not unused, f"queries nobody uses: {sorted(unused)}"
    for name, text in Q.items():
        assert text.startswith("--"), f"query {name} lacks its one-line description"


def test_no_sql_is_built_from_strings_in_python() -> None:
    pattern = re.compile(r"\.(execute|fetch|fetchrow|fetchval|executemany)\(\s*f[\"']")
    offenders = [str(p) for p in HORAE.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []

"""SQL reaches Postgres only as named queries from the .sql files (`Q["name"]`) or as a
constant literal, with values passed as parameters: never built from strings in Python."""

from __future__ import annotations

import ast
from pathlib import Path

HORAE = Path(__file__).resolve().parents[2] / "horae"
RUNS_SQL = {"execute", "executemany", "fetch", "fetchval", "fetchrow"}
# Migrations run the numbered .sql files themselves: the file's text is the query.
FILE_RUNNERS = {("store/migrate.py", "execute")}


def built_sql(root: Path) -> list[str]:
    """`file:line: query` of every query that is neither `Q[...]` nor a string literal."""
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = str(path.relative_to(root))
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr not in RUNS_SQL or not node.args:
                continue
            query = node.args[0]
            named = (isinstance(query, ast.Subscript) and isinstance(query.value, ast.Name)
                     and query.value.id == "Q")  # fmt: skip
            literal = isinstance(query, ast.Constant) and isinstance(query.value, str)
            if named or literal or (relative, node.func.attr) in FILE_RUNNERS:
                continue
            found.append(f"{relative}:{node.lineno}: {ast.unparse(query)[:80]}")
    return found


def test_no_sql_is_built_from_strings() -> None:
    assert built_sql(HORAE) == []


def test_the_scan_finds_string_built_sql(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(
        "async def f(conn, table, name):\n"
        "    await conn.execute(f'DELETE FROM {table}')\n"
        "    await conn.fetch('SELECT * FROM jobs WHERE name = ' + name)\n"
        "    await conn.fetchval(Q['get_job'], name)\n"
    )
    assert [line.split(": ")[0] for line in built_sql(tmp_path)] == ["bad.py:2", "bad.py:3"]

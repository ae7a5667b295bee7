"""SQL reaches Postgres only as named queries from the .sql files (`Q["name"]`), with values
passed as parameters: never built from strings in Python, nor written inline."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from horae.store.queries import Q

HORAE = Path(__file__).resolve().parents[2] / "horae"
RUNS_SQL = {"execute", "executemany", "fetch", "fetchval", "fetchrow"}
# Migrations run the numbered .sql files themselves: the file's text is the query.
FILE_RUNNERS = {("store/migrate.py", "execute")}


def built_sql(root: Path) -> list[str]:
    """`file:line: query` of every query that is not `Q[...]`: built from strings, or an
    inline literal (which the .sql files' one-line descriptions and the hygiene scans
    below would never see)."""
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
            if named or (relative, node.func.attr) in FILE_RUNNERS:
                continue
            found.append(f"{relative}:{node.lineno}: {ast.unparse(query)[:80]}")
    return found


def test_no_sql_is_built_from_strings_or_written_inline() -> None:
    assert built_sql(HORAE) == []


def test_the_scan_finds_string_built_and_inline_sql(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(
        "async def f(conn, table, name):\n"
        "    await conn.execute(f'DELETE FROM {table}')\n"
        "    await conn.fetch('SELECT * FROM jobs WHERE name = ' + name)\n"
        "    await conn.fetchval(Q['get_job'], name)\n"
        "    await conn.fetchval('SELECT 1')\n"
    )
    found = [line.split(": ")[0] for line in built_sql(tmp_path)]
    assert found == ["bad.py:2", "bad.py:3", "bad.py:5"]


SESSION_STATE = re.compile(
    r"^\s*(SET\s+(?!LOCAL\b)|RESET\b|LISTEN\b|DECLARE\b)|pg_advisory_lock\(|pg_try_advisory_lock\(",
    re.IGNORECASE | re.MULTILINE,
)


def session_state(queries: dict[str, str]) -> list[str]:
    return sorted(name for name, sql in queries.items() if SESSION_STATE.search(sql))


def test_named_queries_leave_no_session_state_on_pooled_connections() -> None:
    # store/db.py releases pooled connections without asyncpg's RESET ALL / UNLISTEN *:
    # that is only sound while no query sets session state. The two exceptions run on
    # connections of their own, never a pool's: a move of shards (store/moves.py) holds the
    # catalog's lock and the allowance rebalancer's across its steps and closes the
    # connection after; a scheduler holds its member lock (store/members.py) for as long as
    # it lives, on a `OneConnection`.
    assert session_state(Q) == [
        "lock_allowances_session", "lock_catalog_session", "take_member_lock"
    ]  # fmt: skip
    assert "pool" not in (HORAE / "store" / "moves.py").read_text()
    members = (HORAE / "store" / "members.py").read_text()
    assert "class MemberLocks(OneConnection)" in members and "pool" not in members


def test_the_session_state_scan_finds_it() -> None:
    found = session_state({
        "ok": "SET LOCAL lock_timeout = '1s'; SELECT pg_advisory_xact_lock(1)",
        "set": "SET statement_timeout = 0",
        "listen": "LISTEN horae",
        "lock": "SELECT pg_advisory_lock(42)",
    })  # fmt: skip
    assert found == ["listen", "lock", "set"]


COMPONENTS = ("api", "scheduler", "worker", "operator", "cli")


def lent_connection_uses(source: str) -> list[int]:
    """Lines where a connection lent by a store's `acquire()` is used for anything but
    passing it on (an attribute of it read or called)."""
    tree = ast.parse(source)
    lent: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.AsyncWith):
            for item in node.items:
                call = item.context_expr
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "acquire"
                    and isinstance(item.optional_vars, ast.Name)
                ):
                    lent.add(item.optional_vars.id)
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in lent
    )


def test_components_only_pass_on_the_connections_the_store_lends() -> None:
    # A component holds a store group's pool and passes the connection it lends to the
    # store's functions: it never runs anything on it (nor opens a transaction).
    found = {
        str(path.relative_to(HORAE)): lines
        for package in COMPONENTS
        for path in (HORAE / package).rglob("*.py")
        if (lines := lent_connection_uses(path.read_text()))
    }
    assert found == {}


def test_the_lent_connection_scan_finds_a_use() -> None:
    source = (
        "async def f(db):\n"
        "    async with db.acquire() as conn:\n"
        "        await store.g(conn)\n"
        "        await conn.fetch('SELECT 1')\n"
    )
    assert lent_connection_uses(source) == [4]

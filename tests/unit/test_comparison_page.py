"""docs/comparison.md's Horae column claims only what the code does.

Every code span in that column is checked against the code: a `spec.…` path exists in the
schema of one of Horae's resources (and a `spec.…: Value` is one of its enum values), a
`METHOD /path` is a route of the HTTP API, a kind is one of the CRDs, and anything else
(a policy name, an annotation, a setting) appears in Horae's source. (`horae …` commands
and `HORAE_*` variables are checked for every document by test_docs_honesty.py.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from horae.api.docs import build_openapi
from horae.resources import crds

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "comparison.md"
SPAN = re.compile(r"`([^`]+)`")
ROUTE = re.compile(r"^(GET|POST|PUT|PATCH|DELETE) (/\S+)$")
PEERS = ("Kubernetes CronJob", "Temporal Schedules", "Argo CronWorkflow", "Celery beat")


def horae_cells() -> list[tuple[str, str]]:
    """(row name, Horae cell) of every row of the page's table."""
    rows = [line for line in PAGE.read_text().splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    assert header[1] == "Horae" and tuple(header[2:]) == PEERS, header
    cells = []
    for line in rows[2:]:
        row = [c.strip() for c in line.strip("|").split("|")]
        assert len(row) == len(header), f"a row with {len(row)} cells: {line}"
        cells.append((row[0], row[1]))
    return cells


def spans() -> list[tuple[str, str]]:
    return [(name, span) for name, cell in horae_cells() for span in SPAN.findall(cell)]


def spec_schemas() -> dict[str, dict[str, Any]]:
    """Each kind's `spec` schema."""
    out = {}
    for crd in crds():
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
        out[crd["spec"]["names"]["kind"]] = schema.get("spec", {})
    return out


def walk(schema: dict[str, Any], path: list[str]) -> dict[str, Any] | None:
    for part in path:
        schema = schema.get("properties", {}).get(part)
        if schema is None:
            return None
    return schema


def enum_values(schema: dict[str, Any]) -> Iterator[str]:
    yield from (str(v) for v in schema.get("enum", []))
    for child in schema.get("properties", {}).values():
        yield from enum_values(child)
    if "items" in schema:
        yield from enum_values(schema["items"])


SOURCE = "\n".join(p.read_text() for p in (REPO / "horae").rglob("*.py"))


def test_the_table_has_a_horae_cell_in_every_row() -> None:
    cells = horae_cells()
    assert len(cells) >= 15
    assert all(cell for _, cell in cells)


@pytest.mark.parametrize(("row", "span"), spans(), ids=lambda v: str(v)[:40])
def test_each_thing_the_horae_column_names_exists(row: str, span: str) -> None:
    schemas = spec_schemas()
    routes = {
        f"{method.upper()} {path}"
        for path, operations in build_openapi()["paths"].items()
        for method in operations
    }
    if span.startswith("spec."):
        path, _, value = span.partition(": ")
        found = [walk(s, path.split(".")[1:]) for s in schemas.values()]
        found = [f for f in found if f is not None]
        assert found, f"{row}: no resource has `{path}`"
        if value:
            assert any(value in set(enum_values(f)) for f in found), f"{row}: {span}"
    elif ROUTE.match(span):
        assert span in routes, f"{row}: the HTTP API has no route `{span}`"
    elif span in schemas:
        pass  # a kind
    elif span.startswith(("horae ", "HORAE_")):
        pass  # test_docs_honesty.py checks every document's commands and variables
    else:
        every_enum = {v for s in schemas.values() for v in enum_values(s)}
        assert span in every_enum or span in SOURCE, f"{row}: `{span}` is nowhere in horae/"

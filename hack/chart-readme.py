#!/usr/bin/env python3
"""Write charts/horae/README.md: the prose of charts/horae/README.md.in, with its
`{{ values }}` line replaced by a table of every value, made from values.schema.json
(description, type and bounds) and values.yaml (defaults).

    hack/chart-readme.py           write the README (`make chart-readme`)
    hack/chart-readme.py --check   exit 1, saying so, if the README is not what it would write

A row is written for each value the schema describes; every value must be described, by
itself or by the object holding it (`operator.resources` covers its requests and limits).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[1] / "charts" / "horae"
MARKER = "{{ values }}"


def rows(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, schema) of every described value, in the schema's order."""
    for key, child in node.get("properties", {}).items():
        here = f"{path}.{key}" if path else key
        if "description" in child:
            yield here, child
        yield from rows(child, here)
        items = child.get("items")
        if isinstance(items, dict):
            yield from rows(items, f"{here}[]")


def undescribed(node: dict[str, Any], path: str = "", covered: bool = False) -> list[str]:
    """The values neither described nor inside a described object."""
    found = []
    for key, child in node.get("properties", {}).items():
        here = f"{path}.{key}" if path else key
        inside = covered or "description" in child
        nested = child.get("properties") or isinstance(child.get("items"), dict)
        if not nested and not inside:
            found.append(here)
        found += undescribed(child, here, inside)
        items = child.get("items")
        if isinstance(items, dict):
            found += undescribed(items, f"{here}[]", inside)
    return found


def default(values: Any, path: str, schema: dict[str, Any]) -> str:
    """Its default in values.yaml; none for an object whose values have rows of their own."""
    if any(True for _ in rows(schema)):
        return ""
    for part in path.split("."):
        if part.endswith("[]") or not isinstance(values, dict) or part not in values:
            return ""
        values = values[part]
    if isinstance(values, str):
        return f'`"{values}"`'
    text = yaml.safe_dump(values, default_flow_style=True, sort_keys=False, width=10_000)
    text = text.strip()
    return f"`{text.removesuffix('...').strip()}`"


def kind(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    text = schema.get("type", "object")
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None or high is not None:
        text += f" ({'' if low is None else low}–{'' if high is None else high})"
    elif "exclusiveMinimum" in schema:
        text += f" (> {schema['exclusiveMinimum']})"
    if "pattern" in schema:
        text += f" matching `{schema['pattern']}`"
    return text


CODE = re.compile(r"(`[^`]*`)")


def cell(text: str) -> str:
    """Text for a table cell: pipes escaped; < and > too, outside code (`<cluster>`
    would otherwise be taken for an HTML tag)."""
    parts = CODE.split(text.replace("|", "\\|").replace("\n", " "))
    return "".join(
        p if p.startswith("`") else p.replace("<", "\\<").replace(">", "\\>") for p in parts
    )


def table(schema: dict[str, Any], values: dict[str, Any]) -> str:
    lines = ["| Value | Type | Default | Description |", "|---|---|---|---|"]
    for path, node in rows(schema):
        lines.append(
            f"| `{path}` | {kind(node)} | {cell(default(values, path, node))} "
            f"| {cell(node['description'])} |"
        )
    return "\n".join(lines)


def readme() -> str:
    schema = json.loads((CHART / "values.schema.json").read_text())
    missing = undescribed(schema)
    if missing:
        raise SystemExit(
            "chart-readme: values.schema.json describes neither these values nor an object"
            f" holding them: {', '.join(missing)}"
        )
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    template = (CHART / "README.md.in").read_text()
    if template.count(MARKER) != 1:
        raise SystemExit(f"chart-readme: README.md.in must hold {MARKER} once")
    return template.replace(MARKER, table(schema, values))


def main(argv: list[str]) -> int:
    target = CHART / "README.md"
    text = readme()
    if argv[1:] == ["--check"]:
        if target.exists() and target.read_text() == text:
            return 0
        print(
            "chart-readme: charts/horae/README.md is stale: run `make chart-readme`",
            file=sys.stderr,
        )
        return 1
    target.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

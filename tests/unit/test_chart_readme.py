"""charts/horae/README.md is what hack/chart-readme.py makes of the chart's values schema
and defaults: a value added, changed or described anew without regenerating it fails."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chart_readme", REPO / "hack" / "chart-readme.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_chart_readme_is_generated_from_the_values_schema() -> None:
    readme = (REPO / "charts" / "horae" / "README.md").read_text()
    assert readme == generator().readme(), "charts/horae/README.md is stale: make chart-readme"


def test_every_chart_value_is_described_and_has_a_row() -> None:
    chart_readme = generator()
    schema = chart_readme.json.loads((REPO / "charts" / "horae" / "values.schema.json").read_text())
    assert chart_readme.undescribed(schema) == []
    table = chart_readme.table(schema, {})
    for path in ("shards", "podAnnotations", "serviceAccounts.worker.annotations",
                 "store.groups[].roles.worker.key"):  # fmt: skip
        assert f"| `{path}` |" in table


def test_an_undescribed_value_is_named() -> None:
    schema = {"properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}},
                             "c": {"description": "c", "properties": {"d": {}}}}}  # fmt: skip
    assert generator().undescribed(schema) == ["a.b"]

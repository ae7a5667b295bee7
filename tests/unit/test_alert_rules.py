"""The alerting rules the chart ships (charts/horae/files/alerts.yaml) agree with the code,
their promtool unit tests and the operations guide: every metric a rule reads is one Horae
exports, every alert has promtool cases where it fires and where it does not, and
docs/operations.md lists exactly the alerts shipped. (`promtool` itself runs them:
tests/e2e/test_alerts.py.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.unit.test_docs_honesty import horae_metrics

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "charts" / "horae" / "files" / "alerts.yaml"
PROMTOOL_TESTS = REPO / "tests" / "promtool" / "alerts_test.yaml"
OPERATIONS = REPO / "docs" / "operations.md"

SELECTOR = re.compile(r"\b(horae_[a-z_]+)(\{[^}]*\})?")
HISTOGRAM_SERIES = re.compile(r"_(bucket|sum|count)$")


def rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"]
            for rule in group["rules"]]  # fmt: skip


def alerts() -> set[str]:
    return {rule["alert"] for rule in rules() if "alert" in rule}


def test_every_metric_a_rule_reads_is_one_horae_exports_with_those_labels() -> None:
    exported = horae_metrics()
    unknown = []
    for rule in rules():
        for name, selector in SELECTOR.findall(rule["expr"]):
            base = name if name in exported else HISTOGRAM_SERIES.sub("", name)
            if base not in exported:
                unknown.append(f"{rule['alert']}: {name}")
                continue
            for label in re.findall(r"(\w+)\s*[=!]~?", selector):
                if label not in exported[base]:
                    unknown.append(f"{rule['alert']}: {name}{{{label}}}")
    assert unknown == []


def test_every_alert_has_promtool_cases_where_it_fires_and_where_it_does_not() -> None:
    suite = yaml.safe_load(PROMTOOL_TESTS.read_text())
    assert (PROMTOOL_TESTS.parent / suite["rule_files"][0]).resolve() == RULES
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in suite["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert alerts() - fires == set(), "alerts with no case where they fire"
    assert alerts() - quiet == set(), "alerts with no case where they stay quiet"
    assert (fires | quiet) - alerts() == set(), "cases of alerts that are not shipped"


def test_the_operations_guide_lists_exactly_the_alerts_shipped() -> None:
    text = OPERATIONS.read_text()
    section = text[text.index("## Metrics and alerts") :]
    section = section[: section.index("\n## ", 1)]
    listed = re.findall(r"^\| `(Horae\w+)`", section, flags=re.MULTILINE)
    assert len(listed) == len(set(listed)), "an alert listed twice"
    assert set(listed) == alerts()

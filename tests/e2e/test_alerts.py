"""The alerting rules the chart ships, checked and unit-tested by Prometheus's own
promtool (the pinned build of hack/build-k8s.sh): the rules file is valid, and every case
of tests/promtool/alerts_test.yaml (for each alert, where it fires and where it does not:
tests/unit/test_alert_rules.py) passes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.kube import REPO, k8s_bin

RULES = REPO / "charts" / "horae" / "files" / "alerts.yaml"
PROMTOOL_TESTS = REPO / "tests" / "promtool" / "alerts_test.yaml"


@pytest.fixture(scope="module")
def promtool() -> Path:
    return k8s_bin() / "promtool"


def run(promtool: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *args], capture_output=True, text=True, timeout=120,
                          check=False, cwd=REPO)  # fmt: skip


def test_promtool_finds_the_rules_file_valid(promtool: Path) -> None:
    checked = run(promtool, "check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout


def test_every_promtool_case_of_every_alert_passes(promtool: Path) -> None:
    tested = run(promtool, "test", "rules", str(PROMTOOL_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout and "FAILED" not in tested.stdout

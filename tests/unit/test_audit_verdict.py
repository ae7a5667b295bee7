"""`make audit`'s verdict on pip-audit's JSON report (hack/audit.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

SPEC = importlib.util.spec_from_file_location(
    "audit", Path(__file__).resolve().parents[2] / "hack" / "audit.py"
)
assert SPEC is not None and SPEC.loader is not None
audit = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(audit)


def dep(name: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "version": "1.0", "vulns": [], **kw}


def test_a_known_vulnerability_fails_and_is_named() -> None:
    code, lines = audit.verdict({"dependencies": [
        dep("ok"), dep("bad", vulns=[{"id": "GHSA-xxxx", "fix_versions": ["1.1"]}]),
    ]})  # fmt: skip
    assert code == 1
    assert lines[0] == "make audit: bad 1.0: GHSA-xxxx"
    assert "FAILED: 1 locked package(s)" in lines[-1]


def test_advisory_data_unreachable_for_every_package_says_not_run() -> None:
    skipped = {"skip_reason": "Dependency not found on PyPI and could not be audited"}
    code, lines = audit.verdict({"dependencies": [dep("a", **skipped), dep("b", **skipped)]})
    assert code == 0
    assert lines == [lines[0]] and lines[0].startswith("make audit: NOT RUN")


def test_a_clean_audit_counts_what_was_audited() -> None:
    code, lines = audit.verdict({"dependencies": [
        dep("a"), dep("b"), dep("private", skip_reason="not on PyPI"),
    ]})  # fmt: skip
    assert code == 0
    assert lines == ["make audit: not audited: not on PyPI",
                     "make audit: 2 locked packages, no known vulnerabilities"]  # fmt: skip

"""`make audit`: pip-audit over the locks (requirements.lock: runtime and dev, the
runtime lock's packages among them; requirements-build.lock: what builds the image's
wheel), read as JSON, with one verdict line.

- a locked version with a known vulnerability: exit 1, naming it (bump it in
  pyproject.toml, then `make lock`);
- the advisory service (PyPI's JSON API) answered for no package at all, as on a machine
  whose network reaches PyPI's index but not its vulnerability data: a loud warning and
  exit 0, like the kind tests on a machine without Docker: the audit did not run here,
  which is said, not read as "no known vulnerabilities";
- otherwise exit 0, listing any package the service could not answer for.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
LOCKS = ("requirements.lock", "requirements-build.lock")


def main() -> int:
    proc = subprocess.run(
        [str(BIN / "pip-audit"), "--disable-pip", "--no-deps", "--progress-spinner", "off",
         *(arg for lock in LOCKS for arg in ("-r", lock)), "-f", "json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        print(f"make audit: FAILED: pip-audit exit {proc.returncode}: {proc.stderr.strip()[-500:]}",
              file=sys.stderr)  # fmt: skip
        return 1
    code, lines = verdict(report)
    for line in lines:
        print(line, file=sys.stderr if code or "NOT RUN" in line else sys.stdout)
    return code


def verdict(report: dict[str, Any]) -> tuple[int, list[str]]:
    """The exit code and the lines to print for a `pip-audit -f json` report."""
    deps = report.get("dependencies", [])
    vulnerable = [d for d in deps if d.get("vulns")]
    skipped = [d for d in deps if d.get("skip_reason")]
    if vulnerable:
        lines = [f"make audit: {d['name']} {d.get('version', '')}: "
                 + ", ".join(v["id"] for v in d["vulns"]) for d in vulnerable]  # fmt: skip
        return 1, [*lines, f"make audit: FAILED: {len(vulnerable)} locked package(s) with "
                   "known vulnerabilities; bump them in pyproject.toml, then make lock"]
    if deps and len(skipped) == len(deps):
        return 0, [f"make audit: NOT RUN: PyPI's vulnerability data answered for none of the "
                   f"{len(deps)} locked packages from this machine "
                   f"(e.g. {skipped[0]['skip_reason']}); run `make audit` where it is "
                   "reachable"]  # fmt: skip
    return 0, [*(f"make audit: not audited: {d['skip_reason']}" for d in skipped),
               f"make audit: {len(deps) - len(skipped)} locked packages, no known "
               "vulnerabilities"]  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())

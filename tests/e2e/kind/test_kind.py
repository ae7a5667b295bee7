"""The chart end to end on a kind cluster: the README's walkthrough, command for command
(images built and loaded, the throwaway services applied, `helm install`, the examples
applied), then an execution Succeeded in `kubectl get executions`.

Runs only where `kind` and a working Docker engine exist; skipped, with the reason,
elsewhere (this development machine has no Docker engine). It uses its own cluster
(`horae-e2e`, in place of the README's `horae`), deleted afterwards.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.e2e.kind.walkthrough import readme_commands
from tests.support.kube import REPO

CLUSTER = "horae-e2e"


def _docker_works() -> str | None:
    if shutil.which("kind") is None:
        return "kind is not installed"
    if shutil.which("docker") is None:
        return "docker is not installed"
    if shutil.which("helm") is None or shutil.which("kubectl") is None:
        return "helm and kubectl must be on PATH"
    info = subprocess.run(["docker", "info"], capture_output=True, check=False, timeout=60)
    return None if info.returncode == 0 else "no Docker engine is running"


pytestmark = pytest.mark.skipif(
    (reason := _docker_works()) is not None, reason=f"kind e2e: {reason}"
)


def run(*args: str, input: str | None = None, timeout: float = 900) -> str:
    result = subprocess.run(args, cwd=REPO, input=input, capture_output=True, text=True,
                            check=False, timeout=timeout)  # fmt: skip
    assert result.returncode == 0, f"{' '.join(args)}: {result.stderr}"
    return result.stdout


def kubectl(*args: str, input: str | None = None) -> str:
    return run("kubectl", "--context", f"kind-{CLUSTER}", *args, input=input)


def as_in_test(argv: list[str]) -> list[str]:
    """A README command aimed at this test's cluster; `helm install` also waits for it."""
    if argv[0] == "kind":
        return [CLUSTER if i and argv[i - 1] == "--name" else a for i, a in enumerate(argv)]
    if argv[0] == "kubectl":
        return ["kubectl", "--context", f"kind-{CLUSTER}", *argv[1:]]
    if argv[:2] == ["helm", "install"]:
        return ["helm", "--kube-context", f"kind-{CLUSTER}", *argv[1:],
                "--wait", "--timeout", "10m"]  # fmt: skip
    return argv


@pytest.fixture
def cluster_deleted_afterwards() -> Iterator[None]:
    try:
        yield
    finally:
        subprocess.run(["kind", "delete", "cluster", "--name", CLUSTER], check=False, timeout=300)


@pytest.mark.timeout(3600)  # two image builds and a 10-minute helm --wait
def test_readme_walkthrough_on_kind_runs_scheduled_jobs(cluster_deleted_afterwards: None) -> None:
    for argv in readme_commands():
        run(*as_in_test(argv))
    deadline = time.monotonic() + 300
    statuses: list[str] = []
    while time.monotonic() < deadline:
        items = json.loads(kubectl("get", "executions", "-n", "horae-demo", "-o", "json"))
        statuses = [i["status"]["phase"] for i in items["items"]]
        if "Succeeded" in statuses:
            break
        time.sleep(3)
    assert "Succeeded" in statuses, statuses

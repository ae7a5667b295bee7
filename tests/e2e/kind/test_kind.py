"""The chart end to end on a kind cluster: images built and loaded, `helm install`, a
ScheduledJob applied, its execution Succeeded in `kubectl get executions`.

Runs only where `kind` and a working Docker engine exist; skipped, with the reason,
elsewhere (this development machine has no Docker engine). It uses its own cluster
(`horae-e2e`), deleted afterwards, and the README's commands.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.kube import REPO

CLUSTER = "horae-e2e"
NS = "horae-system"


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


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    run("kind", "create", "cluster", "--name", CLUSTER, "--wait", "120s")
    try:
        yield
    finally:
        subprocess.run(["kind", "delete", "cluster", "--name", CLUSTER], check=False, timeout=300)


def test_helm_install_on_kind_runs_a_scheduled_job(cluster: None) -> None:
    run("docker", "build", "-f", "operator/Dockerfile", "-t", "horae:e2e", ".")
    run("docker", "build", "-f", "worker/Dockerfile", "-t", "horae-worker:e2e", ".")
    run("kind", "load", "docker-image", "--name", CLUSTER, "horae:e2e", "horae-worker:e2e")
    kubectl("create", "namespace", NS)
    kubectl("apply", "-f", str(REPO / "tests" / "e2e" / "kind" / "services.yaml"))
    kubectl("-n", NS, "rollout", "status", "deployment/postgres", "--timeout=300s")
    kubectl("-n", NS, "rollout", "status", "deployment/rabbitmq", "--timeout=300s")
    kubectl(
        "-n",
        NS,
        "create",
        "secret",
        "generic",
        "horae-postgres",
        "--from-literal=url=postgresql://horae:horae@postgres.horae-system:5432/horae",
    )
    kubectl("-n", NS, "create", "secret", "generic", "horae-rabbitmq",
            "--from-literal=url=amqp://horae:horae@rabbitmq.horae-system:5672/")  # fmt: skip
    run("helm", "--kube-context", f"kind-{CLUSTER}", "install", "horae", "charts/horae",
        "-n", NS, "--wait", "--timeout", "10m",
        "--set", "image.repository=horae,image.tag=e2e,image.pullPolicy=Never",
        "--set", "workerPool.image.repository=horae-worker,workerPool.image.tag=e2e")  # fmt: skip
    kubectl("create", "namespace", "horae-demo")
    run_at = (datetime.now(UTC) + timedelta(seconds=20)).strftime("%Y-%m-%dT%H:%M:%SZ")
    manifest = (
        (REPO / "examples" / "once.yaml")
        .read_text()
        .replace('"2030-01-01T09:00:00Z"', f'"{run_at}"')
    )
    kubectl("apply", "-n", "horae-demo", "-f", "-", input=manifest)
    deadline = time.monotonic() + 300
    statuses: list[str] = []
    while time.monotonic() < deadline:
        items = json.loads(kubectl("get", "executions", "-n", "horae-demo", "-o", "json"))
        statuses = [i["status"]["status"] for i in items["items"]]
        if "Succeeded" in statuses:
            break
        time.sleep(3)
    assert "Succeeded" in statuses, statuses

"""Containers run as a non-root numeric user with a read-only root filesystem, no
privilege escalation and no capabilities: the images' USER, and the Deployment the operator
creates for each WorkerPool (the chart's own pods: tests/e2e/test_chart.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from horae.operator.workerpool import IMAGE_USER, Pool, WorkerPoolSpec, deployment_body

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("target", ["horae", "worker"])
def test_each_image_ends_as_a_non_root_numeric_user(target: str) -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    [stage] = re.findall(rf"^FROM \S+ AS {target}\n(.*?)(?=^FROM |\Z)", dockerfile,
                         flags=re.MULTILINE | re.DOTALL)  # fmt: skip
    users = re.findall(r"^USER\s+(\S+)\s*$", stage, flags=re.MULTILINE)
    assert users, f"Dockerfile, target {target}: sets no USER (it would run as root)"
    # Numeric, so that Kubernetes' runAsNonRoot can check it without reading /etc/passwd.
    assert users[-1].isdigit() and int(users[-1]) != 0, users[-1]
    assert int(users[-1]) == IMAGE_USER


def test_the_workerpool_deployment_runs_non_root_read_only_without_capabilities() -> None:
    spec = WorkerPoolSpec.model_validate({"image": "img:1", "tasks": "app.tasks"})
    body = deployment_body(Pool(namespace="ns", name="p", uid="u", spec=spec))
    pod = body["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == IMAGE_USER
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"]:
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        # Writable scratch space where Python and libraries expect it.
        assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {}} in pod["volumes"]

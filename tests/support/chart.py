"""The Helm chart's RBAC, rendered as `helm install horae -n horae-system` would."""

from __future__ import annotations

import subprocess
from typing import Any

import yaml

from tests.support.kube import REPO, ControlPlane

INSTALL_NAMESPACE = "horae-system"


def chart_rbac(control_plane: ControlPlane) -> str:
    """The chart's ServiceAccounts and RBAC as YAML."""
    return subprocess.run(
        [str(control_plane.bin / "helm"), "template", "horae", str(REPO / "charts" / "horae"),
         "-n", INSTALL_NAMESPACE, "--show-only", "templates/serviceaccounts.yaml",
         "--show-only", "templates/rbac.yaml"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip


def chart_cluster_roles(control_plane: ControlPlane) -> dict[str, dict[str, Any]]:
    """The chart's ClusterRoles by name."""
    docs = [d for d in yaml.safe_load_all(chart_rbac(control_plane)) if d]
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}

"""The Helm chart's RBAC, rendered as `helm install horae -n horae-system` would."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support.kube import REPO, ControlPlane, service_account_kubeconfig

INSTALL_NAMESPACE = "horae-system"
COMPONENTS = ("operator", "scheduler", "api")


NAMESPACED = ("ServiceAccount", "Role", "RoleBinding")


def chart_rbac(control_plane: ControlPlane) -> str:
    """The chart's ServiceAccounts and RBAC as YAML, each namespaced object in the install
    namespace unless the chart puts it elsewhere (the aggregated API's RoleBinding in
    kube-system), with `executions.mirror` on: the operator's grants on Execution mirrors
    are the opt-in mirror's, which its tests run under (without it the operator's role has
    none: tests/e2e/test_chart.py)."""
    rendered = subprocess.run(
        [str(control_plane.bin / "helm"), "template", "horae", str(REPO / "charts" / "horae"),
         "-n", INSTALL_NAMESPACE, "--set", "executions.mirror=true",
         "--show-only", "templates/serviceaccounts.yaml", "--show-only", "templates/rbac.yaml"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    for doc in docs:
        if doc["kind"] in NAMESPACED:
            doc["metadata"].setdefault("namespace", INSTALL_NAMESPACE)
    return yaml.safe_dump_all(docs)


def chart_cluster_roles(control_plane: ControlPlane) -> dict[str, dict[str, Any]]:
    """The chart's ClusterRoles by name."""
    docs = [d for d in yaml.safe_load_all(chart_rbac(control_plane)) if d]
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}


def bind_lease_roles(control_plane: ControlPlane, namespace: str) -> None:
    """Leases live in HORAE_NAMESPACE: a test's namespace stands in for the install
    namespace, so the Lease roles are bound there as the chart binds them in its own."""
    for role in ("operator-leader", "scheduler"):
        control_plane.kubectl(
            "create", "rolebinding", f"horae-{role}", "-n", namespace,
            f"--clusterrole=horae-{role}",
            f"--serviceaccount={INSTALL_NAMESPACE}:horae-{role.split('-')[0]}",
        )  # fmt: skip


def install_chart_accounts(plane: ControlPlane, base: Path) -> dict[str, Path]:
    """The chart's ServiceAccounts and RBAC in `plane`'s INSTALL_NAMESPACE: operator,
    scheduler and API run as them under the chart's RBAC, never as admin. A kubeconfig
    (written in `base`) per component."""
    plane.kubectl("create", "namespace", INSTALL_NAMESPACE)
    plane.kubectl("apply", "-f", "-", input=chart_rbac(plane))
    return {
        c: service_account_kubeconfig(
            plane, INSTALL_NAMESPACE, f"horae-{c}", base / f"{c}.kubeconfig"
        )
        for c in COMPONENTS
    }

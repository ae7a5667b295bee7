"""The Helm chart: lints, renders for the default and an all-options values file, every
rendered manifest is accepted by the real API server (`--dry-run=server`), bad values fail
at install naming the value, and the security defaults hold."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kube import REPO, ControlPlane

CHART = REPO / "charts" / "horae"
ALL_OPTIONS = CHART / "ci" / "all-options-values.yaml"

# The optional integrations' kinds, so the API server can dry-run them: the Prometheus
# Operator's ServiceMonitor and KEDA's ScaledObject and TriggerAuthentication.
THIRD_PARTY_CRDS = [
    ("monitoring.coreos.com", "v1", "ServiceMonitor", "servicemonitors"),
    ("keda.sh", "v1alpha1", "ScaledObject", "scaledobjects"),
    ("keda.sh", "v1alpha1", "TriggerAuthentication", "triggerauthentications"),
]


def helm(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(plane.bin / "helm"), *args], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def render(plane: ControlPlane, namespace: str, values: Path | None) -> str:
    extra = ["-f", str(values)] if values else []
    result = helm(plane, "template", "horae", str(CHART), "-n", namespace, *extra)
    assert result.returncode == 0, result.stderr
    return result.stdout


def third_party_crds(plane: ControlPlane) -> None:
    for group, version, kind, plural in THIRD_PARTY_CRDS:
        crd = {
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural},
                     "versions": [{"name": version, "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {
                                       "type": "object",
                                       "x-kubernetes-preserve-unknown-fields": True}}}]},
        }  # fmt: skip
        plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(crd))
        plane.kubectl("wait", "--for=condition=Established", f"crd/{plural}.{group}")


@pytest.mark.parametrize("values", [None, ALL_OPTIONS], ids=["defaults", "all-options"])
def test_chart_lints_and_every_rendered_manifest_is_accepted_by_the_api_server(
    control_plane: ControlPlane, namespace: str, values: Path | None
) -> None:
    lint = helm(control_plane, "lint", str(CHART), *(["-f", str(values)] if values else []))
    assert lint.returncode == 0, lint.stdout + lint.stderr
    third_party_crds(control_plane)
    text = render(control_plane, namespace, values)
    objects = [o for o in yaml.safe_load_all(text) if o]
    applied = control_plane.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-",
                                    input=text, check=False)  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    accepted = [line for line in applied.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(accepted) == len(objects), applied.stdout
    kinds = {o["kind"] for o in objects}
    expected = {"Deployment", "Service", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                "RoleBinding", "PodDisruptionBudget", "Job"}  # fmt: skip
    expected |= (
        {"NetworkPolicy", "ServiceMonitor", "ScaledObject", "TriggerAuthentication"}
        if values else {"WorkerPool"}
    )  # fmt: skip
    assert expected <= kinds, expected - kinds


@pytest.mark.parametrize(
    ("setting", "named"),
    [("shards=0", "/shards"), ("image.tag=", "/image/tag"),
     ("workerPool.name=Not_A_Name", "/workerPool/name"),
     ("api.service.type=Ingress", "/api/service/type"),
     ("database.existingSecret=", "/database/existingSecret"),
     ("replicas=3", "replicas")],
)  # fmt: skip
def test_bad_values_fail_at_install_naming_the_value(
    control_plane: ControlPlane, setting: str, named: str
) -> None:
    result = helm(control_plane, "template", "horae", str(CHART), "--set", setting)
    assert result.returncode != 0
    assert named in result.stderr, result.stderr


def pods(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"])
            for o in objects if o["kind"] in ("Deployment", "Job")]  # fmt: skip


@pytest.mark.parametrize("values", [None, ALL_OPTIONS], ids=["defaults", "all-options"])
def test_every_pod_is_non_root_read_only_and_sized(
    control_plane: ControlPlane, values: Path | None
) -> None:
    objects = [o for o in yaml.safe_load_all(render(control_plane, "horae", values)) if o]
    found = pods(objects)
    assert len(found) >= 4
    for name, spec in found:
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        for container in spec["containers"]:
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True, name
            assert security["allowPrivilegeEscalation"] is False, name
            assert security["capabilities"]["drop"] == ["ALL"], name
            assert container["resources"]["requests"], name
            assert container["resources"]["limits"]["memory"], name
    by_name = {o["metadata"]["name"]: o for o in objects}
    assert by_name["horae-scheduler"]["spec"]["replicas"] == (5 if values else 3)
    for component in ("operator", "api", "scheduler"):
        container = by_name[f"horae-{component}"]["spec"]["template"]["spec"]["containers"][0]
        assert container["livenessProbe"] and container["readinessProbe"], component
        assert f"horae-{component}" in {o["metadata"]["name"] for o in objects
                                        if o["kind"] == "PodDisruptionBudget"}  # fmt: skip
    migrate = by_name["horae-migrate"]
    assert migrate["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"

"""The Helm chart: lints, renders for the default and an all-options values file, every
rendered manifest is accepted by the real API server (`--dry-run=server`), bad values fail
at install naming the value, and the security defaults hold."""

from __future__ import annotations

import subprocess
from base64 import b64decode
from pathlib import Path
from typing import Any

import pytest
import yaml

from horae.operator.workerpool import POOL_LABEL, Pool, WorkerPoolSpec, deployment_body
from tests.support.certs import verify
from tests.support.kube import REPO, ControlPlane, wait_established

CHART = REPO / "charts" / "horae"
ALL_OPTIONS = CHART / "ci" / "all-options-values.yaml"

# The optional integrations' kinds, so the API server can dry-run them: the Prometheus
# Operator's ServiceMonitor, PodMonitor and PrometheusRule, KEDA's ScaledObject and
# TriggerAuthentication, and cert-manager's Issuer and Certificate.
THIRD_PARTY_CRDS = [
    ("monitoring.coreos.com", "v1", "ServiceMonitor", "servicemonitors"),
    ("monitoring.coreos.com", "v1", "PodMonitor", "podmonitors"),
    ("monitoring.coreos.com", "v1", "PrometheusRule", "prometheusrules"),
    ("keda.sh", "v1alpha1", "ScaledObject", "scaledobjects"),
    ("keda.sh", "v1alpha1", "TriggerAuthentication", "triggerauthentications"),
    ("cert-manager.io", "v1", "Issuer", "issuers"),
    ("cert-manager.io", "v1", "Certificate", "certificates"),
]


def helm(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(plane.bin / "helm"), *args], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def render(plane: ControlPlane, namespace: str, values: Path | None, *sets: str) -> str:
    extra = ["-f", str(values)] if values else []
    extra += [arg for setting in sets for arg in ("--set", setting)]
    result = helm(plane, "template", "horae", str(CHART), "-n", namespace, *extra)
    assert result.returncode == 0, result.stderr
    return result.stdout


def third_party_crds(
    plane: ControlPlane, kinds: list[tuple[str, str, str, str]] = THIRD_PARTY_CRDS
) -> None:
    for group, version, kind, plural in kinds:
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
        wait_established(plane, f"{plural}.{group}")


@pytest.mark.parametrize("values", [None, ALL_OPTIONS], ids=["defaults", "all-options"])
def test_chart_lints_and_every_rendered_manifest_is_accepted_by_the_api_server(
    control_plane: ControlPlane, namespace: str, values: Path | None
) -> None:
    lint = helm(control_plane, "lint", str(CHART), *(["-f", str(values)] if values else []))
    assert lint.returncode == 0, lint.stdout + lint.stderr
    third_party_crds(control_plane)
    if values:  # the `helm test` Pod names it, and a pod's PriorityClass must exist
        priority = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                    "metadata": {"name": "horae-critical"}, "value": 1000000}  # fmt: skip
        control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(priority))
    text = render(control_plane, namespace, values)
    objects = [o for o in yaml.safe_load_all(text) if o]
    # Objects the chart puts in a namespace of its own choosing (the aggregated API's
    # RoleBinding in kube-system), then the rest, in the release's.
    placed = [o for o in objects if o["metadata"].get("namespace")]
    accepted = []
    rest = [o for o in objects if o not in placed]
    for batch, where in ((placed, []), (rest, ["-n", namespace])):
        applied = control_plane.kubectl("apply", "--dry-run=server", *where, "-f", "-",
                                        input=yaml.safe_dump_all(batch), check=False)  # fmt: skip
        assert applied.returncode == 0, applied.stderr
        accepted += [line for line in applied.stdout.splitlines()
                     if line.endswith("(server dry run)")]  # fmt: skip
    assert len(accepted) == len(objects), accepted
    kinds = {o["kind"] for o in objects}
    expected = {"Deployment", "Service", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                "RoleBinding", "PodDisruptionBudget", "Job", "Pod", "WorkerPool",
                "APIService"}  # fmt: skip
    if values:
        expected |= {"NetworkPolicy", "ServiceMonitor", "PodMonitor", "PrometheusRule",
                     "ScaledObject", "TriggerAuthentication", "Certificate"}  # fmt: skip
    else:
        expected |= {"Secret"}  # the aggregated API's serving certificate
    assert expected <= kinds, expected - kinds


@pytest.mark.parametrize(
    ("setting", "named"),
    [("shards=0", "/shards"), ("image.tag=", "/image/tag"),
     ("workerPool.name=Not_A_Name", "/workerPool/name"),
     ("api.service.type=Ingress", "/api/service/type"),
     ("database.existingSecret=", "/database/existingSecret"),
     ("database.roles.worker.existingSecret=", "/database/roles/worker/existingSecret"),
     ("replicas=3", "replicas"),
     ("scheduler.renewPeriodSeconds=0", "/scheduler/renewPeriodSeconds"),
     ("scheduler.renewPeriodSeconds=3",
      "scheduler.renewPeriodSeconds 3: must be less than scheduler.leaseDurationSeconds (3)")],
)  # fmt: skip
def test_bad_values_fail_at_install_naming_the_value(
    control_plane: ControlPlane, setting: str, named: str
) -> None:
    result = helm(control_plane, "template", "horae", str(CHART), "--set", setting)
    assert result.returncode != 0
    assert named in result.stderr, result.stderr


def pod_templates(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(kind/name, pod template) of every pod the chart renders: the Deployments', the
    migration Job's and the `helm test` Pod."""
    return [(f"{o['kind']}/{o['metadata']['name']}",
             o if o["kind"] == "Pod" else o["spec"]["template"])
            for o in objects if o["kind"] in ("Deployment", "Job", "Pod")]  # fmt: skip


def pods(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(name, template["spec"]) for name, template in pod_templates(objects)]


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
    deployments = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Deployment"}
    for component in ("operator", "api", "scheduler", "aggregated-api"):
        container = deployments[f"horae-{component}"]["spec"]["template"]["spec"]["containers"][0]
        assert container["livenessProbe"] and container["readinessProbe"], component
        assert f"horae-{component}" in {o["metadata"]["name"] for o in objects
                                        if o["kind"] == "PodDisruptionBudget"}  # fmt: skip
    migrate = by_name["horae-migrate"]
    assert migrate["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"


def test_every_pod_gets_the_scheduling_values_and_every_account_its_annotations(
    control_plane: ControlPlane,
) -> None:
    """podAnnotations, priorityClassName and topologySpreadConstraints reach every pod the
    chart renders, a constraint without a selector spreading that pod's own component; the
    ServiceAccounts get serviceAccounts.annotations with their component's over them."""
    values = yaml.safe_load(ALL_OPTIONS.read_text())
    objects = [o for o in yaml.safe_load_all(render(control_plane, "horae", ALL_OPTIONS)) if o]
    found = pod_templates(objects)
    assert {name.split("/")[0] for name, _ in found} == {"Deployment", "Job", "Pod"}
    for name, template in found:
        spec, labels = template["spec"], template["metadata"]["labels"]
        assert template["metadata"]["annotations"].items() >= values["podAnnotations"].items()
        assert spec["priorityClassName"] == "horae-critical", name
        by_zone, by_host = spec["topologySpreadConstraints"]
        assert by_zone["labelSelector"]["matchLabels"].items() <= labels.items(), name
        assert by_zone["topologyKey"] == "topology.kubernetes.io/zone"
        assert by_host["labelSelector"] == {"matchLabels": {"app.kubernetes.io/instance": "horae"}}
    # The WorkerPool carries them to the Deployment the operator makes of it, which
    # spreads a constraint without a selector over the pool's own pods
    # (tests/unit/test_workerpool.py).
    (pool,) = [o["spec"] for o in objects if o["kind"] == "WorkerPool"]
    assert pool["podAnnotations"] == values["podAnnotations"]
    assert pool["priorityClassName"] == "horae-critical"
    assert pool["topologySpreadConstraints"] == values["topologySpreadConstraints"]
    accounts = {o["metadata"]["name"]: o["metadata"].get("annotations", {})
                for o in objects if o["kind"] == "ServiceAccount"}  # fmt: skip
    common = values["serviceAccounts"]["annotations"]
    for component, own in values["serviceAccounts"].items():
        if component != "annotations":
            name = "aggregated-api" if component == "aggregatedApi" else component
            assert accounts[f"horae-{name}"].items() >= (common | own["annotations"]).items()
    hook = accounts["horae-migrations"]
    assert hook["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert int(hook["helm.sh/hook-weight"]) < 0  # before the Job (weight 0), which runs as it


def env_names(spec: dict[str, Any]) -> set[str]:
    return {e["name"] for container in spec["containers"] for e in container.get("env", [])}


def test_only_the_migration_hook_decides_shards_and_retention(control_plane: ControlPlane) -> None:
    """The installation's settings are stored by `horae migrate`, and every process reads
    them from the database: a configured retention reaches the one place that decides it,
    and no component carries its own copy (which once let the hook drop history at 30 days
    whatever `database.retentionDays` said)."""
    text = render(control_plane, "horae", ALL_OPTIONS, "database.retentionDays=400", "shards=16")
    objects = [o for o in yaml.safe_load_all(text) if o]
    by_name = {f"{o['kind']}/{o['metadata']['name']}": o for o in objects}
    hook = by_name["Job/horae-migrate"]["spec"]["template"]["spec"]["containers"][0]
    assert hook["args"] == ["migrate", "--shards=16", "--retention-days=400"]
    for name, spec in pods(objects):
        assert not env_names(spec) & {"HORAE_RETENTION_DAYS", "HORAE_SHARDS"}, name
    pools = [o for o in yaml.safe_load_all(render(control_plane, "horae", None)) if o]
    for pool in (o for o in pools if o["kind"] == "WorkerPool"):
        assert not {e["name"] for e in pool["spec"]["env"]} & {"HORAE_RETENTION_DAYS"}


def test_a_shorter_scheduler_lease_renewed_within_a_second_reaches_the_schedulers(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """The option docs/performance.md measured: a 2 s member Lease renewed every 0.5 s (in a
    values file: `--set` passes 0.5 as a string)."""
    values = tmp_path / "lease.yaml"
    values.write_text(yaml.safe_dump(
        {"scheduler": {"leaseDurationSeconds": 2, "renewPeriodSeconds": 0.5}}
    ))  # fmt: skip
    objects = [o for o in yaml.safe_load_all(render(control_plane, "horae", values)) if o]
    [scheduler] = [o for o in objects if o["kind"] == "Deployment"
                   and o["metadata"]["name"] == "horae-scheduler"]  # fmt: skip
    container = scheduler["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["HORAE_LEASE_DURATION_SECONDS"], env["HORAE_RENEW_PERIOD_SECONDS"]) == ("2", "0.5")


def test_the_dead_webhook_reaches_the_schedulers_and_the_workers(
    control_plane: ControlPlane,
) -> None:
    """Workers send the deaths they record; the schedulers' reaper sends those it finds."""
    url = "https://hooks.example.com/horae"
    objects = [o for o in yaml.safe_load_all(render(control_plane, "horae", None,
                                                    f"deadWebhookUrl={url}")) if o]  # fmt: skip
    by_name = {f"{o['kind']}/{o['metadata']['name']}": o for o in objects}
    scheduler = by_name["Deployment/horae-scheduler"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in scheduler["containers"][0]["env"]}
    assert env["HORAE_DEAD_WEBHOOK_URL"] == url
    pool = by_name["WorkerPool/default"]["spec"]
    assert {"name": "HORAE_DEAD_WEBHOOK_URL", "value": url} in pool["env"]


def test_keda_scales_the_workerpool_through_its_scale_subresource(
    control_plane: ControlPlane,
) -> None:
    """With KEDA the pool stays a WorkerPool (whose Deployment the operator runs, its pods
    given the worker's grace): the ScaledObject targets the pool itself, whose replicas
    only KEDA sets (autoscaling External), so no plain Deployment of workers is rendered."""
    text = render(control_plane, "horae", ALL_OPTIONS, "workerPool.shutdownGraceSeconds=50")
    objects = [o for o in yaml.safe_load_all(text) if o]
    [pool] = [o for o in objects if o["kind"] == "WorkerPool"]
    assert pool["metadata"]["name"] == "invoices"
    assert pool["spec"]["autoscaling"] == "External"
    assert "replicas" not in pool["spec"], "an upgrade would reset what KEDA set"
    assert not {"minReplicas", "maxReplicas", "targetBacklogPerReplica"} & set(pool["spec"])
    [scaled] = [o for o in objects if o["kind"] == "ScaledObject"]
    assert scaled["spec"]["scaleTargetRef"] == {
        "apiVersion": "horae.dev/v1alpha1", "kind": "WorkerPool", "name": "invoices",
    }  # fmt: skip
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (2, 20)
    assert not [o for o in objects if o["kind"] == "Deployment"
                and "horae.dev/workerpool" in o["metadata"].get("labels", {})]  # fmt: skip
    env = {e["name"]: e.get("value") for e in pool["spec"]["env"]}
    assert env["HORAE_SHUTDOWN_GRACE_SECONDS"] == "50"  # the operator's pods get its grace
    defaults = [o for o in yaml.safe_load_all(render(control_plane, "horae", None)) if o]
    [builtin] = [o for o in defaults if o["kind"] == "WorkerPool"]
    assert builtin["spec"]["autoscaling"] == "Builtin"
    assert (builtin["spec"]["minReplicas"], builtin["spec"]["maxReplicas"]) == (1, 10)


def database_secret(spec: dict[str, Any]) -> str:
    [url] = [e for c in spec["containers"] for e in c.get("env", [])
             if e["name"] == "HORAE_DATABASE_URL"]  # fmt: skip
    return str(url["valueFrom"]["secretKeyRef"]["name"])


@pytest.mark.parametrize("values", [None, ALL_OPTIONS], ids=["defaults", "all-options"])
def test_each_component_reaches_postgres_through_its_own_secret(
    control_plane: ControlPlane, values: Path | None
) -> None:
    """One credential per component (migration 004's roles); only the migration hook gets
    the schema owner's."""
    objects = [o for o in yaml.safe_load_all(render(control_plane, "horae", values)) if o]
    by_name = {f"{o['kind']}/{o['metadata']['name']}": o for o in objects}
    owner, prefix = ("pg", "pg-") if values else ("horae-postgres", "horae-postgres-")
    assert database_secret(by_name["Job/horae-migrate"]["spec"]["template"]["spec"]) == owner
    for component in ("api", "operator", "scheduler"):
        spec = by_name[f"Deployment/horae-{component}"]["spec"]["template"]["spec"]
        assert database_secret(spec) == prefix + component, component
    pool = by_name["WorkerPool/invoices" if values else "WorkerPool/default"]["spec"]
    assert database_secret({"containers": [pool]}) == prefix + "worker"
    # The aggregated API's role is in horae_viewer (migration 014): it only reads.
    aggregated = by_name["Deployment/horae-aggregated-api"]["spec"]["template"]["spec"]
    assert database_secret(aggregated) == prefix + "viewer"
    secrets = {database_secret(spec) for _, spec in pods(objects)}
    assert len(secrets) == 5  # the pool's pods are the operator's


def group_urls(spec: dict[str, Any]) -> dict[str, str]:
    """HORAE_STORE_GROUP_<NAME>_URL -> the Secret it is read from, of a pod spec."""
    return {e["name"]: e["valueFrom"]["secretKeyRef"]["name"]
            for c in spec["containers"] for e in c.get("env", [])
            if e["name"].startswith("HORAE_STORE_GROUP_")}  # fmt: skip


def postgres_workloads(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every workload that talks to PostgreSQL, by kind/name: the chart's Deployments, hook
    Job and test Pod, and the WorkerPool (whose env the operator gives its Deployment)."""
    found = dict(pods(objects))
    found.update({f"WorkerPool/{o['metadata']['name']}": {"containers": [o["spec"]]}
                  for o in objects if o["kind"] == "WorkerPool"})  # fmt: skip
    return found


@pytest.mark.parametrize("keda", [False, True], ids=["workerpool", "keda"])
def test_each_store_group_reaches_every_component_through_its_own_secret(
    control_plane: ControlPlane, tmp_path: Path, keda: bool
) -> None:
    """`store.groups`: the migration hook gets each group's owner URL, and every component
    its own login's URL in that group (HORAE_STORE_GROUP_<NAME>_URL, `-` as `_`, the
    variable `horae.store.groups.group_env` names); a group without a component's URL gives
    that component none (it uses the catalog's address with its own credentials)."""
    components = ("api", "operator", "scheduler", "worker", "viewer")
    values = {
        "keda": {"enabled": keda},
        "store": {"groups": [
            {"name": "second", "existingSecret": "pg2-app",
             "roles": {c: {"existingSecret": f"pg2-{c}"} for c in components}},
            {"name": "eu-west-3", "existingSecret": "pg3-app", "key": "dsn",
             "roles": {c: {"existingSecret": f"pg3-{c}", "key": "url"} for c in components}},
            {"name": "third", "existingSecret": "pg4-app"},
        ]},
    }  # fmt: skip
    path = tmp_path / "groups.yaml"
    path.write_text(yaml.safe_dump(values))
    objects = [o for o in yaml.safe_load_all(render(control_plane, "horae", path)) if o]
    workloads = postgres_workloads(objects)
    # `helm test`'s Pod reads the store as the API does.
    who = {"Deployment/horae-api": "api", "Deployment/horae-operator": "operator",
           "Deployment/horae-scheduler": "scheduler", "WorkerPool/default": "worker",
           "Pod/horae-test": "api", "Deployment/horae-aggregated-api": "viewer"}  # fmt: skip
    assert sorted(workloads) == sorted([*who, "Job/horae-migrate"])
    second, west, third = (
        "HORAE_STORE_GROUP_SECOND_URL", "HORAE_STORE_GROUP_EU_WEST_3_URL",
        "HORAE_STORE_GROUP_THIRD_URL",
    )  # fmt: skip
    hook = workloads["Job/horae-migrate"]
    assert group_urls(hook) == {second: "pg2-app", west: "pg3-app", third: "pg4-app"}
    for name, component in who.items():
        expected = {second: f"pg2-{component}", west: f"pg3-{component}"}
        assert group_urls(workloads[name]) == expected, name
    keys = {(e["name"], e["valueFrom"]["secretKeyRef"]["key"])
            for spec in workloads.values() for c in spec["containers"]
            for e in c.get("env", []) if e["name"].startswith("HORAE_STORE_GROUP_")}  # fmt: skip
    assert keys == {(second, "uri"), (west, "dsn"), (west, "url"), (third, "uri")}
    from horae.store.groups import group_env

    assert {group_env(g) for g in ("second", "eu-west-3", "third")} == {second, west, third}


@pytest.mark.parametrize(
    ("groups", "message"),
    [(["Second"], 'store.groups[0].name "Second": a store group\'s name is 1 to 32 lowercase'),
     (["second", "a_b"], 'store.groups[1].name "a_b": a store group\'s name'),
     (["x-"], 'store.groups[0].name "x-"'), (["a" * 33], "1 to 32 lowercase"),
     (["main"], 'store.groups[0].name "main": main is the first group'),
     (["second", "second"], 'store.groups[1].name "second": listed twice')],
)  # fmt: skip
def test_a_bad_store_group_name_fails_at_install_naming_it(
    control_plane: ControlPlane, tmp_path: Path, groups: list[str], message: str
) -> None:
    """The catalog's rule for a group's name (migration 007), checked before anything is
    installed: a component would otherwise look for a variable no group has."""
    path = tmp_path / "groups.yaml"
    path.write_text(yaml.safe_dump(
        {"store": {"groups": [{"name": g, "existingSecret": "s"} for g in groups]}}
    ))  # fmt: skip
    result = helm(control_plane, "template", "horae", str(CHART), "-f", str(path))
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_the_cloudnativepg_store_group_example_is_accepted_by_the_api_server(
    control_plane: ControlPlane, namespace: str
) -> None:
    """docs/operations.md's walkthrough applies examples/store-groups/cloudnativepg.yaml:
    its Clusters (CloudNativePG's kind, registered here schemaless) and its admin Pod
    (checked field by field, strictly) must be accepted as written."""
    third_party_crds(control_plane, [("postgresql.cnpg.io", "v1", "Cluster", "clusters")])
    example = REPO / "examples" / "store-groups" / "cloudnativepg.yaml"
    objects = [o for o in yaml.safe_load_all(example.read_text()) if o]
    assert [o["kind"] for o in objects] == ["Cluster", "Cluster", "Pod"]
    main, second, pod = objects
    assert main["spec"] == second["spec"]  # every group alike: the same owner and roles
    for o in objects:
        o["metadata"]["namespace"] = namespace
    text = yaml.safe_dump_all(objects)
    applied = control_plane.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-",
                                    input=text, check=False)  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.count("(server dry run)") == 3, applied.stdout
    container = pod["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {e["name"] for e in container["env"]} == {"HORAE_DATABASE_URL", "PGPASSWORD"}


def test_the_monitors_scrape_what_the_components_serve_and_the_rule_is_the_tested_file(
    control_plane: ControlPlane,
) -> None:
    """The PodMonitor finds the worker pods the operator makes (their label, their port),
    and the PrometheusRule ships charts/horae/files/alerts.yaml as promtool tests it."""
    objects = [o for o in yaml.safe_load_all(render(control_plane, "horae", ALL_OPTIONS)) if o]
    by_kind = {o["kind"]: o for o in objects}
    rules = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    assert by_kind["PrometheusRule"]["spec"] == rules
    assert by_kind["PrometheusRule"]["metadata"]["labels"]["release"] == "kube-prometheus-stack"

    pool = Pool(namespace="billing", name="reports", uid="u", tenants=("billing",),
                spec=WorkerPoolSpec.model_validate({"image": "w:1", "tasks": "t"}))  # fmt: skip
    pod = deployment_body(pool)["spec"]["template"]
    monitor = by_kind["PodMonitor"]["spec"]
    [selected] = monitor["selector"]["matchExpressions"]
    assert (selected["key"], selected["operator"]) == (POOL_LABEL, "Exists")
    assert POOL_LABEL in pod["metadata"]["labels"]
    [endpoint] = monitor["podMetricsEndpoints"]
    assert endpoint["port"] in {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
    [relabel] = endpoint["relabelings"]
    assert relabel["sourceLabels"] == ["__meta_kubernetes_pod_label_horae_dev_workerpool"]
    assert monitor["namespaceSelector"] == {"matchNames": ["billing", "invoicing"]}
    defaults = [o for o in yaml.safe_load_all(
        render(control_plane, "horae", None, "metrics.podMonitor.enabled=true")) if o]  # fmt: skip
    [default_monitor] = [o for o in defaults if o["kind"] == "PodMonitor"]
    assert default_monitor["spec"]["namespaceSelector"] == {"any": True}


def rendered(plane: ControlPlane, namespace: str, *sets: str) -> dict[str, dict[str, Any]]:
    """The chart's objects with the default values and `sets`, by kind/name."""
    objects = [o for o in yaml.safe_load_all(render(plane, namespace, None, *sets)) if o]
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in objects}


def test_the_apiservice_trusts_the_serving_certificate_the_chart_makes(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """kube-apiserver proxies `kubectl get executions` to the aggregated API's Service and
    checks its certificate for `<service>.<namespace>.svc` against the APIService's
    caBundle: by default the chart makes both, and the pods serve that very certificate;
    with cert-manager, its cainjector fills the caBundle from the Certificate the pods
    serve."""
    objects = rendered(control_plane, "team-a")
    api_service = objects["APIService/v1alpha1.runs.horae.dev"]["spec"]
    assert api_service["service"] == {"namespace": "team-a", "name": "horae-aggregated-api",
                                      "port": 443}  # fmt: skip
    assert api_service["insecureSkipTLSVerify"] is False
    assert (api_service["group"], api_service["version"]) == ("runs.horae.dev", "v1alpha1")
    assert api_service["groupPriorityMinimum"] > 1000  # before the CRD's horae.dev
    secret = objects["Secret/horae-aggregated-api-tls"]["data"]
    ca, cert = b64decode(api_service["caBundle"]).decode(), b64decode(secret["tls.crt"]).decode()
    assert b64decode(secret["ca.crt"]).decode() == ca
    assert verify(ca, cert, hostname="horae-aggregated-api.team-a.svc",
                  directory=tmp_path).endswith("OK")  # fmt: skip
    with pytest.raises(AssertionError):  # another release namespace's name is not covered
        verify(ca, cert, hostname="horae-aggregated-api.team-b.svc", directory=tmp_path)

    [port] = objects["Service/horae-aggregated-api"]["spec"]["ports"]
    pod = objects["Deployment/horae-aggregated-api"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert port["port"] == 443
    assert {"name": port["targetPort"], "containerPort": 8443} in container["ports"]
    assert container["args"] == ["aggregated-api"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HORAE_AGGREGATED_PORT"] == "8443"
    assert "HORAE_BROKER_URL" not in env  # it never talks to RabbitMQ
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "tls"]
    assert env["HORAE_TLS_CERT_FILE"] == f"{mount['mountPath']}/tls.crt"
    assert env["HORAE_TLS_KEY_FILE"] == f"{mount['mountPath']}/tls.key"
    [volume] = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == "horae-aggregated-api-tls"

    managed = rendered(control_plane, "team-a", "aggregatedApi.certManager.enabled=true")
    assert "Secret/horae-aggregated-api-tls" not in managed
    injected = managed["APIService/v1alpha1.runs.horae.dev"]
    assert "caBundle" not in injected["spec"]
    source = injected["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    certificate = managed[f"Certificate/{source.removeprefix('team-a/')}"]["spec"]
    assert source.startswith("team-a/")
    assert certificate["secretName"] == "horae-aggregated-api-tls"
    assert "horae-aggregated-api.team-a.svc" in certificate["dnsNames"]
    issuer = managed[f"Issuer/{certificate['issuerRef']['name']}"]["spec"]
    root = managed[f"Certificate/{issuer['ca']['secretName']}"]["spec"]  # the chart's own CA
    assert root["isCA"] is True
    assert "selfSigned" in managed[f"Issuer/{root['issuerRef']['name']}"]["spec"]

    off = rendered(control_plane, "team-a", "aggregatedApi.enabled=false")
    assert not [name for name in off if "aggregated-api" in name or "APIService" in name]


def rules_on(role: dict[str, Any], group: str, resource: str) -> list[str]:
    return [verb for rule in role["rules"] if group in rule["apiGroups"]
            and resource in rule["resources"] for verb in rule["verbs"]]  # fmt: skip


def test_only_the_opt_in_mirror_lets_the_operator_write_executions_to_etcd(
    control_plane: ControlPlane,
) -> None:
    """By default executions are served from the store (the aggregated API) and the
    operator may not touch Execution resources; `executions.mirror` turns the CRD mirror
    on (HORAE_EXECUTION_MIRROR) with the grants it needs. The aggregated API gets what
    every extension API server needs, and readers of a namespace its executions."""
    for mirror in (False, True):
        objects = rendered(control_plane, "horae", f"executions.mirror={str(mirror).lower()}")
        operator = objects["ClusterRole/horae-operator"]
        granted = rules_on(operator, "horae.dev", "executions")
        assert granted == (["list", "create", "patch", "delete", "deletecollection"]
                           if mirror else [])  # fmt: skip
        container = objects["Deployment/horae-operator"]["spec"]["template"]["spec"]
        env = {e["name"]: e.get("value") for e in container["containers"][0]["env"]}
        assert env.get("HORAE_EXECUTION_MIRROR") == ("1" if mirror else None)

    account = {"kind": "ServiceAccount", "name": "horae-aggregated-api", "namespace": "horae"}
    delegator = objects["ClusterRoleBinding/horae-aggregated-api-auth-delegator"]
    assert delegator["roleRef"]["name"] == "system:auth-delegator"
    assert delegator["subjects"] == [account]
    reader = objects["RoleBinding/horae-aggregated-api-auth-reader"]
    assert reader["metadata"]["namespace"] == "kube-system"
    assert (reader["roleRef"]["kind"], reader["roleRef"]["name"]) == (
        "Role", "extension-apiserver-authentication-reader")  # fmt: skip
    assert reader["subjects"] == [account]
    viewer = objects["ClusterRole/horae-executions-viewer"]
    assert rules_on(viewer, "runs.horae.dev", "executions") == ["get", "list", "watch"]
    labels = viewer["metadata"]["labels"]
    for role in ("view", "edit", "admin"):
        assert labels[f"rbac.authorization.k8s.io/aggregate-to-{role}"] == "true"

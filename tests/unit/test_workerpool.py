from __future__ import annotations

import pytest

from horae.operator.tenancy import TenantsNotAllowed, served_tenants
from horae.operator.workerpool import (
    Decision,
    Pool,
    ScaleDown,
    WorkerPoolSpec,
    decide,
    deployment_body,
    desired_replicas,
)
from horae.operator.workerpool.autoscaler import scaling_condition
from horae.operator.workerpool.deployment import initial_replicas


@pytest.mark.parametrize(
    ("ready", "expected"),
    [(0, 1), (1, 1), (100, 1), (101, 2), (750, 8), (1000, 8), (1_000_000, 8)],
)
def test_desired_replicas_is_one_per_target_backlog_within_the_bounds(
    ready: int, expected: int
) -> None:
    assert desired_replicas(ready, minimum=1, maximum=8, target=100) == expected


def test_an_empty_queue_asks_for_the_minimum_which_may_be_zero() -> None:
    assert desired_replicas(0, minimum=0, maximum=8, target=100) == 0
    assert desired_replicas(0, minimum=3, maximum=8, target=100) == 3
    assert desired_replicas(1, minimum=0, maximum=8, target=100) == 1


def _decide(current: int, desired: int, waiting: ScaleDown | None, now: float) -> Decision:
    return decide(
        current=current, desired=desired, maximum=10, waiting=waiting, now=now, window=300
    )


def test_scaling_up_happens_at_once() -> None:
    assert _decide(2, 8, None, now=0) == Decision(8, None)


def test_a_pending_scale_down_is_dropped_when_desired_climbs_back() -> None:
    assert _decide(8, 8, ScaleDown(since=0, peak=3), now=10) == Decision(8, None)
    assert _decide(8, 9, ScaleDown(since=0, peak=3), now=10) == Decision(9, None)


def test_scaling_down_waits_for_the_whole_stabilization_window() -> None:
    first = _decide(8, 2, None, now=1000)
    assert first == Decision(8, ScaleDown(since=1000, peak=2))
    held = _decide(8, 1, first.waiting, now=1299.9)
    assert held == Decision(8, ScaleDown(since=1000, peak=2))
    assert _decide(8, 1, held.waiting, now=1300) == Decision(2, None)


def test_scaling_down_goes_to_the_highest_figure_asked_for_in_the_window() -> None:
    waiting = _decide(8, 1, None, now=0).waiting
    waiting = _decide(8, 5, waiting, now=100).waiting
    waiting = _decide(8, 1, waiting, now=200).waiting
    assert _decide(8, 1, waiting, now=300) == Decision(5, None)


def test_a_lowered_maximum_applies_at_once() -> None:
    decision = decide(current=10, desired=4, maximum=4, waiting=None, now=0, window=300)
    assert decision == Decision(4, None)


def test_a_zero_window_scales_down_at_once() -> None:
    decision = decide(current=8, desired=1, maximum=10, waiting=None, now=0, window=0)
    assert decision == Decision(1, None)


def _pool(**spec: object) -> Pool:
    parsed = WorkerPoolSpec.model_validate({"image": "img:1", "tasks": "app.tasks", **spec})
    return Pool(namespace="ns", name="crunchers", uid="u-1", spec=parsed)


def test_the_deployment_runs_the_pool_workers_and_leaves_replicas_alone() -> None:
    body = deployment_body(_pool(concurrency=4, serviceAccountName="sa"))
    assert "replicas" not in body["spec"]
    assert body["spec"]["selector"]["matchLabels"] == {"horae.dev/workerpool": "crunchers"}
    pod = body["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "sa"
    (container,) = pod["containers"]
    assert container["command"] == ["horae", "worker", "--tasks", "app.tasks"]
    assert container["env"] == [
        {"name": "HORAE_POOL", "value": "crunchers"},
        {"name": "HORAE_POOL_NAMESPACE", "value": "ns"},
        {"name": "HORAE_TENANTS", "value": "ns"},
        {"name": "HORAE_CONCURRENCY", "value": "4"},
        {"name": "HORAE_METRICS_PORT", "value": "9100"},
    ]
    assert "resources" not in container
    assert container["ports"] == [{"name": "metrics", "containerPort": 9100}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert pod["automountServiceAccountToken"] is False


def test_the_pods_get_the_pools_annotations_priority_and_placement() -> None:
    zone = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway"}  # fmt: skip
    mine = {"matchLabels": {"team": "reports"}}
    body = deployment_body(
        _pool(
            podAnnotations={"sidecar.istio.io/inject": "false"},
            priorityClassName="batch-high",
            nodeSelector={"pool": "workers"},
            tolerations=[{"key": "dedicated", "operator": "Exists"}],
            topologySpreadConstraints=[zone, {**zone, "labelSelector": mine}],
        )
    )
    template = body["spec"]["template"]
    assert template["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    pod = template["spec"]
    assert pod["priorityClassName"] == "batch-high"
    assert pod["nodeSelector"] == {"pool": "workers"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    spread, own = pod["topologySpreadConstraints"]
    assert spread == {
        **zone,
        "labelSelector": {"matchLabels": {"horae.dev/workerpool": "crunchers"}},
    }
    assert own["labelSelector"] == mine  # a selector of the pool's own is kept
    plain = deployment_body(_pool())["spec"]["template"]
    assert "annotations" not in plain["metadata"]
    assert not {"priorityClassName", "nodeSelector", "tolerations",
                "topologySpreadConstraints"} & plain["spec"].keys()  # fmt: skip


def test_a_pools_own_metrics_port_is_the_probes_port() -> None:
    env = [{"name": "HORAE_METRICS_PORT", "value": "9300"}]
    container = deployment_body(_pool(env=env))["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9300}]
    assert [e for e in container["env"] if e["name"] == "HORAE_METRICS_PORT"] == env


SERVES_NS = [
    {"name": "HORAE_POOL", "value": "crunchers"},
    {"name": "HORAE_POOL_NAMESPACE", "value": "ns"},
    {"name": "HORAE_TENANTS", "value": "ns"},
]


def test_env_entries_of_the_pool_come_last_and_win_over_ours() -> None:
    env = [{"name": "HORAE_CONCURRENCY", "value": "9"}, {"name": "FOO", "value": "bar"}]
    body = deployment_body(_pool(concurrency=4, env=env))
    container = body["spec"]["template"]["spec"]["containers"][0]
    assert container["env"] == [*SERVES_NS, {"name": "HORAE_METRICS_PORT", "value": "9100"}, *env]


def test_the_pool_env_cannot_choose_the_tenants_its_workers_serve() -> None:
    # Refused at apply by the CRD; a pool stored before that rule has them dropped.
    env = [
        {"name": "HORAE_TENANTS", "value": "team-a"},
        {"name": "HORAE_POOL", "value": "x"},
        {"name": "HORAE_POOL_NAMESPACE", "value": "team-a"},
        {"name": "FOO", "value": "1"},
    ]
    body = deployment_body(_pool(env=env))
    container = body["spec"]["template"]["spec"]["containers"][0]
    metrics = {"name": "HORAE_METRICS_PORT", "value": "9100"}
    assert container["env"] == [*SERVES_NS, metrics, {"name": "FOO", "value": "1"}]


def test_a_pool_serves_its_own_namespace_unless_an_administrator_shares_it() -> None:
    assert served_tenants("team-b", None, install_namespace="horae") == ("team-b",)
    shared = served_tenants("horae", ["team-b", "team-a", "team-b"], install_namespace="horae")
    assert shared == ("team-a", "team-b")
    with pytest.raises(TenantsNotAllowed, match=r"spec\.tenants: only a WorkerPool in Horae's"):
        served_tenants("team-b", ["team-a"], install_namespace="horae")
    with pytest.raises(TenantsNotAllowed):
        served_tenants("team-b", ["team-b"], install_namespace="horae")


def test_a_shared_pool_gets_its_tenants_in_its_environment() -> None:
    pool = _pool()
    pool = Pool(
        namespace="horae", name="shared", uid="u-2", spec=pool.spec, tenants=("team-a", "team-b")
    )
    env = deployment_body(pool)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "HORAE_TENANTS", "value": "team-a,team-b"} in env
    assert {"name": "HORAE_POOL_NAMESPACE", "value": "horae"} in env


@pytest.mark.parametrize(("env", "expected"), [
    ([], 25 + 5 + 10),
    ([{"name": "HORAE_SHUTDOWN_GRACE_SECONDS", "value": "100"}], 115),
    ([{"name": "HORAE_SHUTDOWN_GRACE_SECONDS", "value": "2.5"}], 18),
    ([{"name": "HORAE_SHUTDOWN_GRACE_SECONDS", "value": "soon"}], 40),  # refused by the worker
])  # fmt: skip
def test_pods_are_killed_only_after_the_grace_period_and_the_hand_back(
    env: list[dict[str, str]], expected: int
) -> None:
    pod = deployment_body(_pool(env=env))["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == expected  # grace + stop_wait + 10 s


def test_the_spec_defaults_are_the_crd_schema_defaults() -> None:
    from horae.resources import workerpool_schema

    props = workerpool_schema()["properties"]["spec"]["properties"]
    spec = WorkerPoolSpec.model_validate({"image": "i", "tasks": "t"})
    assert spec.min_replicas == props["minReplicas"]["default"] == 1
    assert spec.max_replicas == props["maxReplicas"]["default"] == 10
    assert spec.target_backlog_per_replica == props["targetBacklogPerReplica"]["default"] == 100
    assert spec.autoscaling == props["autoscaling"]["default"] == "Builtin"
    assert spec.replicas is None and "default" not in props["replicas"]


def test_a_pool_without_replicas_takes_what_its_deployment_runs_or_its_minimum() -> None:
    from horae.kube import DeploymentReplicas

    running = DeploymentReplicas(replicas=7, ready_replicas=5, controller_uid="u-1")
    assert initial_replicas(_pool(minReplicas=2), None) == 2
    assert initial_replicas(_pool(minReplicas=2), running) == 7
    assert initial_replicas(_pool(minReplicas=2, replicas=4), running) == 4
    assert _pool().with_replicas(3).spec.replicas == 3
    assert _pool().selector == "horae.dev/workerpool=crunchers"


def _scaling(pool: Pool, ready: int, desired: int, decision: Decision) -> tuple[bool, str, str]:
    condition = scaling_condition(pool, ready=ready, desired=desired, decision=decision, window=300)
    assert condition.type == "Scaling"
    return condition.status, condition.reason, condition.message


def test_scaling_says_what_holds_the_replicas() -> None:
    pool = _pool(maxReplicas=8)
    assert _scaling(pool, 250, 3, Decision(3, None)) == (
        False,
        "DesiredReplicas",
        "3 replicas, as the queue asks",
    )
    assert _scaling(pool, 10, 1, Decision(5, ScaleDown(since=0, peak=1))) == (
        True,
        "ScaleDownStabilizing",
        "the queue asks for 1 replicas; 5 kept until it has asked for fewer for 300s",
    )
    assert _scaling(pool, 2000, 8, Decision(8, None)) == (
        False,
        "MaxReplicas",
        "the queue asks for 20 replicas; held at maxReplicas 8",
    )
    external = _pool(autoscaling="External", replicas=4)
    assert _scaling(external, 2000, 4, Decision(4, None)) == (
        False,
        "External",
        "4 replicas, as spec.replicas says",
    )

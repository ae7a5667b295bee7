from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from horae.operator.tenancy import TenantsNotAllowed, served_tenants
from horae.operator.workerpool import (
    Decision,
    Pool,
    ScaleDown,
    Spike,
    Wanted,
    WorkerPoolSpec,
    decide,
    deployment_body,
    desired_replicas,
    wanted,
)
from horae.operator.workerpool.ahead import DueSoon
from horae.operator.workerpool.autoscaler import scaling_condition
from horae.operator.workerpool.deployment import initial_replicas
from horae.store.due import DueCount


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


def _scaling(
    pool: Pool, ready: int, desired: int, decision: Decision, spike: Spike | None = None
) -> tuple[bool, str, str]:
    target = pool.spec.target_backlog_per_replica
    ahead = math.ceil(spike.count / target) if spike is not None else 0
    want = Wanted(desired, math.ceil(ready / target), ahead, spike)
    condition = scaling_condition(
        pool, wanted=want, decision=decision, window=300, lead=60, ready_pods=2
    )
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
    at = datetime(2026, 12, 2, 13, 0, tzinfo=UTC)
    assert _scaling(pool, 50, 5, Decision(5, None), Spike(at, at, 500)) == (
        True,
        "ScaleAhead",
        "500 executions due at 13:00:00 UTC ask for 5 replicas: 5 asked 60s ahead, 2 ready",
    )
    assert _scaling(pool, 0, 8, Decision(8, None), Spike(at, at, 5000)) == (
        True,
        "ScaleAhead",
        "5000 executions due at 13:00:00 UTC ask for 50 replicas; held at maxReplicas 8:"
        " 8 asked 60s ahead, 2 ready",
    )


NOON = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
LEAD = timedelta(seconds=60)
PERIOD = timedelta(seconds=5)


def _spike(seconds: float, count: int, spread: float = 0) -> Spike:
    first = NOON + timedelta(seconds=seconds)
    return Spike(first, first + timedelta(seconds=spread), count)


def _wanted(ready: int, due: list[Spike], *, minimum: int = 1, maximum: int = 20) -> Wanted:
    return wanted(
        ready=ready,
        due=due,
        now=NOON,
        lead=LEAD,
        period=PERIOD,
        minimum=minimum,
        maximum=maximum,
        target=100,
    )


def test_a_spike_within_the_lead_asks_for_its_replicas_before_it_falls_due() -> None:
    # 1,500 due in 50 s: a pod asked for now is Ready (60 s) in time for it.
    want = _wanted(0, [_spike(50, 1500)])
    assert (want.replicas, want.queue, want.ahead) == (15, 0, 15)
    assert want.spike == _spike(50, 1500)
    # due just beyond the lead but before the next round's: asked for now as well
    assert _wanted(0, [_spike(64, 1500)]).replicas == 15


def test_a_spike_further_than_the_lead_and_a_period_is_left_to_a_later_round() -> None:
    want = _wanted(0, [_spike(66, 1500)])
    assert (want.replicas, want.ahead, want.spike) == (1, 0, None)


def test_the_largest_spike_ahead_decides_and_the_queue_is_never_shorted() -> None:
    assert _wanted(0, [_spike(10, 300), _spike(40, 900), _spike(55, 200)]).replicas == 9
    # the queue already asks for more than the spike: the queue's figure
    want = _wanted(1200, [_spike(30, 500)])
    assert (want.replicas, want.queue, want.ahead) == (12, 12, 5)


def test_what_the_spike_asks_for_stays_within_min_and_max() -> None:
    assert _wanted(0, [_spike(30, 5000)], maximum=8).replicas == 8
    assert _wanted(0, [_spike(30, 50)], minimum=3).replicas == 3
    assert _wanted(0, [], minimum=0).replicas == 0


def test_a_spike_counts_until_its_last_execution_is_due_then_the_queue_takes_over() -> None:
    # the bin began 5 s ago and runs 3 s more: its rest is still to come
    assert _wanted(0, [_spike(-5, 800, spread=8)]).replicas == 8
    # its last execution was due a second ago: what is left of it is in the queue
    assert _wanted(0, [_spike(-10, 800, spread=9)]).replicas == 1


def test_after_the_spike_its_replicas_are_released_only_once_stabilization_passed() -> None:
    # ahead of the spike: up at once
    up = decide(current=1, desired=_wanted(0, [_spike(50, 1500)]).replicas, maximum=20,
                waiting=None, now=0, window=300)  # fmt: skip
    assert up == Decision(15, None)
    # the spike passed and the queue is empty: 15 kept for the window, then released
    after = wanted(ready=0, due=[_spike(50, 1500)], now=NOON + timedelta(seconds=51),
                   lead=LEAD, period=PERIOD, minimum=1, maximum=20, target=100)  # fmt: skip
    held = decide(current=15, desired=after.replicas, maximum=20, waiting=None, now=60,
                  window=300)  # fmt: skip
    assert held.replicas == 15 and held.waiting is not None
    assert decide(current=15, desired=1, maximum=20, waiting=held.waiting, now=359,
                  window=300).replicas == 15  # fmt: skip
    assert decide(current=15, desired=1, maximum=20, waiting=held.waiting, now=360,
                  window=300).replicas == 1  # fmt: skip


def _due(tenant: str, seconds: float, count: int, spread: float = 0) -> DueCount:
    first = NOON + timedelta(seconds=seconds)
    return DueCount(tenant, first, first + timedelta(seconds=spread), count)


def test_each_slice_of_due_time_is_read_once_and_a_bin_it_cut_is_put_back_together() -> None:
    due = DueSoon()
    horizon = LEAD + PERIOD
    assert due.next_slice(NOON, horizon) == (NOON, NOON + horizon)
    due.add(NOON + horizon, [_due("shop", 61, 100, spread=3)])  # the bin 60-70 s, cut at 65
    later = NOON + timedelta(seconds=5)
    assert due.next_slice(later, horizon) == (NOON + horizon, later + horizon)
    assert due.next_slice(NOON + timedelta(seconds=2), timedelta(seconds=10)) is None
    due.add(later + horizon, [_due("shop", 66, 50, spread=1), _due("shop", 70, 7)])
    assert due.spikes(["shop"]) == [_spike(61, 150, spread=6), _spike(70, 7)]
    # a pause longer than the horizon: the next read starts from now
    late = NOON + timedelta(minutes=10)
    assert due.next_slice(late, horizon) == (late, late + horizon)


def test_a_pool_takes_the_spikes_of_every_tenant_it_serves_and_no_others() -> None:
    due = DueSoon()
    due.add(NOON + LEAD, [_due("a", 30, 100), _due("b", 32, 40), _due("c", 31, 1000)])
    assert due.spikes(["a", "b"]) == [_spike(30, 140, spread=2)]
    assert due.spikes(["d"]) == []


def test_passed_spikes_are_forgotten() -> None:
    due = DueSoon()
    due.add(NOON + LEAD, [_due("a", 10, 100, spread=2), _due("a", 40, 5)])
    due.forget_passed(NOON + timedelta(seconds=12))
    assert due.spikes(["a"]) == [_spike(10, 100, spread=2), _spike(40, 5)]
    due.forget_passed(NOON + timedelta(seconds=13))
    assert due.spikes(["a"]) == [_spike(40, 5)]

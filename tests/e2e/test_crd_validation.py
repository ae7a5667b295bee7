"""The API server itself refuses bad ScheduledJob and WorkerPool manifests at `kubectl apply`,
naming the field."""

from __future__ import annotations

import json

import pytest

from horae.schedule import validate_cron
from tests.support.kube import ControlPlane

GOOD = {"task": "send-invoice", "schedule": "0 9 * * 1"}

BAD = [
    ({"task": "t", "schedule": "* * * * *", "runAt": "2030-01-01T00:00:00Z"},
     "exactly one of spec.runAt and spec.schedule"),
    ({"task": "t"}, "exactly one of spec.runAt and spec.schedule"),
    ({"task": "t", "schedule": "every day"}, "spec.schedule"),
    ({"task": "t", "schedule": "* * * * *", "timeZone": "Not a zone!"}, "spec.timeZone"),
    ({"task": "t", "runAt": "tomorrow"}, "spec.runAt"),
    ({"task": "t", "schedule": "* * * * *", "retryPolicy": {"maxAttempts": 0}},
     "spec.retryPolicy.maxAttempts"),
    ({"task": "t", "schedule": "* * * * *",
      "retryPolicy": {"initialIntervalSeconds": 10, "maxIntervalSeconds": 1}},
     "spec.retryPolicy.maxIntervalSeconds"),
    ({"task": "t", "schedule": "* * * * *", "payload": [1, 2]}, "spec.payload"),
    ({"task": "Not A Task", "schedule": "* * * * *"}, "spec.task"),
    ({"task": "t", "schedule": "* * * * *", "jitterSeconds": 99999}, "spec.jitterSeconds"),
    ({"task": "t", "schedule": "* * * * *", "concurrencyPolicy": "Buffer"},
     'spec.concurrencyPolicy: Unsupported value: "Buffer": supported values: "Allow",'
     ' "Forbid", "Replace", "BufferOne"'),
    ({"task": "t", "schedule": "61 * * * *"}, "spec.schedule: Invalid value: \"string\": the "
                                              "minute field must be 0-59"),
    ({"task": "t", "schedule": "0 24 * * *"}, "the hour field must be 0-23"),
    ({"task": "t", "schedule": "0 0 32 * *"}, "the day-of-month field must be 1-31"),
    ({"task": "t", "schedule": "0 0 * 13 *"}, "the month field must be 1-12"),
    ({"task": "t", "schedule": "0 0 * * 8"}, "the day-of-week field must be 0-7"),
    ({"task": "t", "schedule": "*/0 * * * *"}, "the minute field must be 0-59"),
    ({"task": "t", "schedule": "60  */2 * * * *"}, "the second field must be 0-59"),
    # An instant near year 9999 overflowed in the operator (and stopped its resync pass).
    ({"task": "t", "runAt": "9999-12-31T23:59:59Z", "jitterSeconds": 3600},
     "spec.runAt must be from 1970-01-01T00:00:00Z to before 9000-01-01T00:00:00Z"),
    ({"task": "t", "runAt": "0001-01-01T00:00:00+01:00"}, "spec.runAt must be from"),
    # a CronJob's history limits, or Horae's one: not both
    ({"task": "t", "schedule": "* * * * *", "historyLimit": 5, "successfulJobsHistoryLimit": 3},
     "spec.historyLimit: Invalid value: \"object\": spec.historyLimit cannot be combined with"
     " spec.successfulJobsHistoryLimit or spec.failedJobsHistoryLimit"),
    ({"task": "t", "schedule": "* * * * *", "historyLimit": 0, "failedJobsHistoryLimit": 0},
     "spec.historyLimit cannot be combined"),
    ({"task": "t", "schedule": "* * * * *", "successfulJobsHistoryLimit": -1},
     "spec.successfulJobsHistoryLimit: Invalid value: -1: spec.successfulJobsHistoryLimit in body"
     " should be greater than or equal to 0"),
    ({"task": "t", "schedule": "* * * * *", "failedJobsHistoryLimit": 1001},
     "spec.failedJobsHistoryLimit: Invalid value: 1001"),
    ({"task": "t", "schedule": "* * * * *", "failedJobsHistoryLimit": "one"},
     "spec.failedJobsHistoryLimit: Invalid value: \"string\""),
    ({"task": "t", "schedule": "* * * * *", "failurePolicy": {"pauseAfterConsecutiveFailures": 0}},
     "spec.failurePolicy.pauseAfterConsecutiveFailures: Invalid value: 0"),
    ({"task": "t", "schedule": "* * * * *",
      "failurePolicy": {"pauseAfterConsecutiveFailures": 1001}},
     "spec.failurePolicy.pauseAfterConsecutiveFailures: Invalid value: 1001"),
    ({"task": "t", "schedule": "* * * * *", "failurePolicy": {}},
     "spec.failurePolicy.pauseAfterConsecutiveFailures: Required value"),
    # catch-up: a policy of three, a window as a Go duration from 1s to 31 days
    ({"task": "t", "schedule": "* * * * *", "catchUp": {"policy": "Sometimes"}},
     "spec.catchUp.policy: Unsupported value: \"Sometimes\""),
    ({"task": "t", "schedule": "* * * * *", "catchUp": {"window": "1d"}},
     "spec.catchUp.window: Invalid value: \"1d\""),
    ({"task": "t", "schedule": "* * * * *", "catchUp": {"window": "1.5h"}},
     "spec.catchUp.window: Invalid value"),
    ({"task": "t", "schedule": "* * * * *", "catchUp": {"window": "0s"}},
     "spec.catchUp.window must be from 1s to 744h (31 days)"),
    ({"task": "t", "schedule": "* * * * *", "catchUp": {"window": "745h"}},
     "spec.catchUp.window must be from 1s to 744h (31 days)"),
    ({"task": "t", "schedule": "* * * * *", "catchUp": {"window": "44641m"}},
     "spec.catchUp.window must be from 1s to 744h (31 days)"),
]  # fmt: skip


def manifest(namespace: str, spec: dict[str, object], name: str = "j") -> str:
    meta = {"name": name, "namespace": namespace}
    body = {"apiVersion": "horae.dev/v1alpha1", "kind": "ScheduledJob", "metadata": meta}
    return json.dumps({**body, "spec": spec})


@pytest.mark.parametrize(("spec", "field"), BAD, ids=[f for _, f in BAD])
def test_bad_manifests_are_refused_naming_the_field(
    control_plane: ControlPlane, namespace: str, spec: dict[str, object], field: str
) -> None:
    result = control_plane.kubectl("apply", "-f", "-", input=manifest(namespace, spec), check=False)
    assert result.returncode != 0
    assert field in result.stderr, result.stderr
    assert control_plane.get_json("scheduledjobs", "-n", namespace)["items"] == []


def test_a_name_too_long_to_label_its_executions_is_refused(
    control_plane: ControlPlane, namespace: str
) -> None:
    long_name = manifest(namespace, GOOD, name="j" * 64)
    result = control_plane.kubectl("apply", "-f", "-", input=long_name, check=False)
    assert result.returncode != 0
    assert "metadata.name: at most 63 characters" in result.stderr, result.stderr
    assert control_plane.get_json("scheduledjobs", "-n", namespace)["items"] == []


def test_a_good_manifest_is_accepted_with_defaults(
    control_plane: ControlPlane, namespace: str
) -> None:
    control_plane.kubectl("apply", "-f", "-", input=manifest(namespace, GOOD))
    obj = control_plane.get_json("scheduledjob", "j", "-n", namespace)
    assert obj["spec"]["timeZone"] == "UTC" and obj["spec"]["concurrencyPolicy"] == "Allow"
    names = control_plane.kubectl("get", "horae", "-n", namespace).stdout
    assert "scheduledjob.horae.dev/j" in names


GOOD_SCHEDULES = [
    "*/2 * * * * *", "0 0 L * *", "0 0 LW * *", "0 9 * * MON-FRI", "0 0 * * 5L",
    "0 0 * * mon#2", "0 0 1 jan,JUL *", "@hourly", "15,45 */2 1-15/3 * *", "00 09 * * 7",
    "59  23   31 12 6", "30 0-59/15 * * * sun",
]  # fmt: skip


@pytest.mark.parametrize("schedule", GOOD_SCHEDULES)
def test_every_form_of_cron_the_operator_accepts_passes_the_api_server(
    control_plane: ControlPlane, namespace: str, schedule: str
) -> None:
    validate_cron(schedule)  # the operator's own check accepts it
    spec = {"task": "t", "schedule": schedule}
    result = control_plane.kubectl("apply", "--dry-run=server", "-f", "-",
                                   input=manifest(namespace, spec), check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr


def pool_manifest(namespace: str, spec: dict[str, object], name: str = "p") -> str:
    meta = {"name": name, "namespace": namespace}
    body = {"apiVersion": "horae.dev/v1alpha1", "kind": "WorkerPool", "metadata": meta}
    return json.dumps({**body, "spec": spec})


POOL = {"image": "registry.example/w:1", "tasks": "app.tasks"}
BAD_POOLS = [
    ({**POOL, "replicas": -1}, "spec.replicas: Invalid value: -1"),
    ({**POOL, "replicas": 1001}, "spec.replicas: Invalid value: 1001"),
    ({**POOL, "autoscaling": "KEDA"},
     'spec.autoscaling: Unsupported value: "KEDA": supported values: "Builtin", "External"'),
    ({**POOL, "minReplicas": 5, "maxReplicas": 2}, "spec.minReplicas must be <= spec.maxReplicas"),
    ({"tasks": "app.tasks"}, "spec.image: Required value"),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "field"), BAD_POOLS, ids=[f for _, f in BAD_POOLS])
def test_bad_workerpools_are_refused_naming_the_field(
    control_plane: ControlPlane, namespace: str, spec: dict[str, object], field: str
) -> None:
    applied = control_plane.kubectl(
        "apply", "-f", "-", input=pool_manifest(namespace, spec), check=False
    )
    assert applied.returncode != 0
    assert field in applied.stderr, applied.stderr
    assert control_plane.get_json("workerpools", "-n", namespace)["items"] == []


def test_scaling_a_workerpool_past_its_bounds_is_refused_naming_the_field(
    control_plane: ControlPlane, namespace: str
) -> None:
    """The scale subresource writes spec.replicas: the schema holds there too."""
    control_plane.kubectl("apply", "-f", "-", input=pool_manifest(namespace, POOL))
    scaled = control_plane.kubectl(
        "scale", "workerpool", "p", "-n", namespace, "--replicas=5000", check=False
    )
    assert scaled.returncode != 0
    assert "spec.replicas" in scaled.stderr, scaled.stderr
    assert "replicas" not in control_plane.get_json("workerpool", "p", "-n", namespace)["spec"]
    control_plane.kubectl("scale", "workerpool", "p", "-n", namespace, "--replicas=3")
    assert control_plane.get_json("workerpool", "p", "-n", namespace)["spec"]["replicas"] == 3


def test_kubectl_explain_reads_every_field(control_plane: ControlPlane) -> None:
    """A user learns a field from the cluster: `kubectl explain` shows its description."""
    retry = control_plane.kubectl("explain", "scheduledjob.spec.retryPolicy").stdout
    assert "How a failed or timed-out attempt is retried" in retry
    assert "maxAttempts" in retry and "Attempts in all" in retry
    autoscaling = control_plane.kubectl("explain", "workerpool.spec.autoscaling").stdout
    assert "Who sets spec.replicas" in autoscaling
    condition = control_plane.kubectl(
        "explain", "scheduledjob.status.conditions.lastTransitionTime"
    ).stdout
    assert "When the condition last changed status" in condition

"""Random invalid ScheduledJob and WorkerPool manifests, applied with kubectl to the real
kube-apiserver, are refused with an error naming the offending field, and nothing is created.

Each manifest is a valid one with one mutation drawn from the CRD's own schema: a wrong
type, a number out of range, a string too long or off its pattern (bad cron, bad zone,
bad task name), a value outside an enum, an unknown field, a required field removed, or a
broken cross-field rule. Bounded (it is one kubectl call per example).

The CRD checks a schedule's shape (field count, characters) and each field's values
(test_crd_validation); a range written backwards ("5-1 * * * *") is left to the operator,
which refuses it with an InvalidSpec Event.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.kube import ControlPlane

REPO = Path(__file__).resolve().parents[2]

VALID = {
    "ScheduledJob": {
        "task": "send-invoice", "payload": {"customer": 42}, "schedule": "0 9 * * 1",
        "timeZone": "Europe/Paris", "jitterSeconds": 5, "suspend": False,
        "concurrencyPolicy": "Forbid", "startingDeadlineSeconds": 60, "timeoutSeconds": 30,
        "historyLimit": 5,
        "retryPolicy": {"maxAttempts": 3, "initialIntervalSeconds": 1, "maxIntervalSeconds": 60},
    },
    "WorkerPool": {
        "image": "registry.example/horae-worker:1", "tasks": "billing.tasks", "minReplicas": 1,
        "maxReplicas": 5, "targetBacklogPerReplica": 100, "concurrency": 8,
        "resources": {"limits": {"cpu": "1"}}, "env": [{"name": "A", "value": "b"}],
        "serviceAccountName": "billing",
    },
}  # fmt: skip
PLURAL = {"ScheduledJob": "scheduledjobs", "WorkerPool": "workerpools"}

# Broken cross-field rules: (kind, spec changes, the field the error names).
RULES = [
    ("ScheduledJob", {"runAt": "2030-01-01T00:00:00Z"}, "spec.runAt"),  # with schedule too
    ("ScheduledJob", {"retryPolicy": {"initialIntervalSeconds": 10, "maxIntervalSeconds": 1}},
     "spec.retryPolicy.maxIntervalSeconds"),
    ("WorkerPool", {"minReplicas": 6, "maxReplicas": 5}, "spec.minReplicas"),
]  # fmt: skip


def spec_schema(kind: str) -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / f"{PLURAL[kind]}.yaml").read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return dict(version["schema"]["openAPIV3Schema"]["properties"]["spec"])


def wrong_type(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    kinds = {
        "string": st.one_of(st.integers(), st.booleans(), st.lists(st.integers(), max_size=2)),
        "integer": st.one_of(st.text(min_size=1, max_size=5), st.booleans(),
                             st.floats(0.1, 0.9)),
        "number": st.one_of(st.text(min_size=1, max_size=5), st.booleans()),
        "boolean": st.one_of(st.sampled_from(["yes", "true"]), st.integers(2, 9)),
        "object": st.one_of(st.text(max_size=5), st.integers(), st.lists(st.integers())),
        "array": st.one_of(st.text(max_size=5), st.integers(), st.just({"a": 1})),
    }  # fmt: skip
    return kinds[schema["type"]]


def bad_values(schema: dict[str, Any]) -> list[st.SearchStrategy[Any]]:
    """Values the schema of one field refuses."""
    options = [wrong_type(schema)]
    if "minimum" in schema:
        low = schema["minimum"]
        options.append(st.integers(-(10**9), int(low) - 1) if schema["type"] == "integer"
                       else st.floats(-(10.0**9), low, exclude_max=True))  # fmt: skip
    if "maximum" in schema:
        high = schema["maximum"]
        options.append(st.integers(int(high) + 1, 10**12) if schema["type"] == "integer"
                       else st.floats(high, 10.0**12, exclude_min=True))  # fmt: skip
    if "maxLength" in schema:
        options.append(st.integers(schema["maxLength"] + 1, schema["maxLength"] + 50)
                       .map(lambda n: "a" * n))  # fmt: skip
    if "pattern" in schema:  # '!' fits no pattern here: bad task names, zones and crons
        options.append(st.sampled_from(["every day!", "* * *", "* * * * * * *", "Not A Name!",
                                        "0 9 ! * *", " ", "-leading"]))  # fmt: skip
    if "enum" in schema:
        options.append(st.text(min_size=1, max_size=8).filter(lambda v: v not in schema["enum"]))
    return options


@st.composite
def invalid_spec(draw: st.DrawFn, kind: str) -> tuple[dict[str, Any], str]:
    """A valid spec with one mutation, and the field path its refusal must name."""
    schema = spec_schema(kind)
    spec = copy.deepcopy(VALID[kind])
    mutation = draw(st.sampled_from(["value", "value", "value", "unknown", "missing", "rule"]))
    if mutation == "unknown":
        name = draw(st.from_regex(r"[a-z][a-zA-Z]{2,12}", fullmatch=True)
                    .filter(lambda n: n not in schema["properties"]))  # fmt: skip
        spec[name] = draw(st.one_of(st.integers(), st.text(max_size=5)))
        return spec, f"spec.{name}"
    if mutation == "missing":
        field = draw(st.sampled_from(schema["required"]))
        del spec[field]
        return spec, f"spec.{field}"
    if mutation == "rule":
        _, changes, field = draw(st.sampled_from([r for r in RULES if r[0] == kind]))
        return {**spec, **changes}, field
    # A value: a top-level field, or one inside an object with its own properties.
    fields = [(k,) for k, s in schema["properties"].items()
              if ("properties" not in s and "x-kubernetes-preserve-unknown-fields" not in s)
              or s.get("type") in ("object", "array")]  # fmt: skip
    fields += [(k, n) for k, s in schema["properties"].items() for n in s.get("properties", {})]
    path = draw(st.sampled_from(fields))
    field_schema = schema["properties"][path[0]]
    if len(path) == 2:
        field_schema = field_schema["properties"][path[1]]
        spec[path[0]] = {**spec.get(path[0], {}), path[1]: None}
    value = draw(st.one_of(*bad_values(field_schema)))
    if len(path) == 2:
        spec[path[0]][path[1]] = value
    else:
        spec[path[0]] = value
    return spec, "spec." + ".".join(path)


def apply(plane: ControlPlane, namespace: str, kind: str, spec: dict[str, Any]) -> str:
    manifest = {"apiVersion": "horae.dev/v1alpha1", "kind": kind,
                "metadata": {"name": "fuzzed", "namespace": namespace}, "spec": spec}  # fmt: skip
    result = plane.kubectl("apply", "-f", "-", input=json.dumps(manifest), check=False)
    assert result.returncode != 0, f"accepted: {spec}"
    return result.stderr


@pytest.mark.parametrize("kind", ["ScheduledJob", "WorkerPool"])
def test_random_invalid_manifests_are_refused_naming_the_field(
    control_plane: ControlPlane, namespace: str, kind: str
) -> None:
    # The valid manifest itself passes (a server dry run): the refusals are the mutations'.
    meta = {"name": "valid", "namespace": namespace}
    manifest = {"apiVersion": "horae.dev/v1alpha1", "kind": kind, "metadata": meta,
                "spec": VALID[kind]}  # fmt: skip
    control_plane.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(manifest))

    @settings(max_examples=30, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(case=invalid_spec(kind))
    def refused(case: tuple[dict[str, Any], str]) -> None:
        spec, field = case
        error = apply(control_plane, namespace, kind, spec)
        assert field in error, f"{spec}\n{error}"

    refused()
    assert control_plane.get_json(PLURAL[kind], "-n", namespace)["items"] == []

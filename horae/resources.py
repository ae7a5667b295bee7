"""Horae's Kubernetes resources: the ScheduledJob spec model and the CRDs generated from it.

`crds()` is the single source of the manifests in `crds/` and in the chart;
`python -m horae.resources` (`make crds`) writes them and a test fails when the
checked-in YAML differs. Their schemas (`horae.crd_schemas`) state `JobSpec`'s bounds
(`horae.domain.limits`) so the API server itself refuses what the store would refuse,
naming the field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

# Facts about the resources the operator reads from here (re-exported).
from horae.crd_schemas import MIRRORED_ERROR_CHARS as MIRRORED_ERROR_CHARS
from horae.crd_schemas import RESERVED_POOL_ENV as RESERVED_POOL_ENV
from horae.crd_schemas import execution_schema, scheduledjob_schema, workerpool_schema
from horae.domain.limits import payload_size_error
from horae.models import ConcurrencyPolicy, JobSpec, RetryPolicy

GROUP = "horae.dev"
VERSION = "v1alpha1"
CATEGORY = "horae"

_CAMEL = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)
"""A manifest's fields, camelCase (`retryPolicy`), also accepted by their Python names."""


class RetrySpec(RetryPolicy):
    """`spec.retryPolicy`: the job's RetryPolicy (its bounds and defaults), in camelCase."""

    model_config = _CAMEL


class ScheduledJobSpec(BaseModel):
    """`spec` of a ScheduledJob, as users write it."""

    model_config = _CAMEL

    task: str
    payload: dict[str, Any] = Field(default_factory=dict)
    run_at: datetime | None = None
    schedule: str | None = None
    time_zone: str = "UTC"
    jitter_seconds: int = 0
    suspend: bool = False
    concurrency_policy: ConcurrencyPolicy = ConcurrencyPolicy.ALLOW
    starting_deadline_seconds: int | None = None
    retry_policy: RetrySpec = Field(default_factory=RetrySpec)
    timeout_seconds: int | None = None
    history_limit: int = Field(default=10, ge=0, le=1000)

    @field_validator("payload")
    @classmethod
    def _payload_storable(cls, value: dict[str, Any]) -> dict[str, Any]:
        # CEL cannot measure a serialized size: the operator refuses it (InvalidSpec).
        error = payload_size_error(value)
        if error is not None:
            raise ValueError(error)
        return value

    def job_spec(self) -> JobSpec:
        """The store's JobSpec; raises pydantic.ValidationError with the field named."""
        return JobSpec(
            task=self.task,
            payload=self.payload,
            run_at=self.run_at,
            cron=self.schedule,
            time_zone=self.time_zone,
            jitter_seconds=self.jitter_seconds,
            retry=RetryPolicy(**self.retry_policy.model_dump()),
            timeout_seconds=self.timeout_seconds,
            concurrency_policy=self.concurrency_policy,
            starting_deadline_seconds=self.starting_deadline_seconds,
        )


def _crd(
    kind: str,
    plural: str,
    short: str,
    schema: dict[str, Any],
    columns: list[tuple[str, str, str]],
    *,
    status: bool = True,
) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "additionalPrinterColumns": [{"name": n, "type": t, "jsonPath": p} for n, t, p in columns],
    }
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short],
                "categories": [CATEGORY],
            },
            "versions": [version],
        },
    }


def crds() -> list[dict[str, Any]]:
    """Every Horae CRD, in apply order."""
    age = ("Age", "date", ".metadata.creationTimestamp")
    return [
        _crd(
            "ScheduledJob",
            "scheduledjobs",
            "sj",
            scheduledjob_schema(),
            [
                ("Task", "string", ".spec.task"),
                ("Schedule", "string", ".spec.schedule"),
                ("Suspend", "boolean", ".spec.suspend"),
                ("Next Run", "date", ".status.nextRunAt"),
                ("Last Status", "string", ".status.lastStatus"),
                age,
            ],
        ),
        _crd(
            "Execution",
            "executions",
            "ex",
            execution_schema(),
            [
                ("Job", "string", ".metadata.labels.horae\\.dev/job"),
                ("Attempt", "integer", ".status.attempt"),
                ("Status", "string", ".status.status"),
                ("Due", "date", ".status.dueAt"),
                ("Started", "date", ".status.startedAt"),
                ("Duration", "string", ".status.duration"),
            ],
            status=False,  # written whole by the operator: no spec to guard
        ),
        _crd(
            "WorkerPool",
            "workerpools",
            "wp",
            workerpool_schema(),
            [
                ("Tasks", "string", ".spec.tasks"),
                ("Desired", "integer", ".status.desiredReplicas"),
                ("Ready", "integer", ".status.readyReplicas"),
                ("Queue", "integer", ".status.queueDepth"),
                age,
            ],
        ),
    ]


def render() -> dict[str, str]:
    """File name -> YAML text of each CRD, as checked in under crds/."""
    import yaml

    header = "# Generated by `make crds` from horae/resources.py. Do not edit.\n"
    return {
        f"{crd['spec']['names']['plural']}.yaml": header + yaml.safe_dump(crd, sort_keys=False)
        for crd in crds()
    }


if __name__ == "__main__":
    import sys
    from pathlib import Path

    targets = [Path(p) for p in sys.argv[1:]] or [Path("crds"), Path("charts/horae/crds")]
    for out in targets:
        out.mkdir(parents=True, exist_ok=True)
        for file, text in render().items():
            (out / file).write_text(text)
            print(out / file)

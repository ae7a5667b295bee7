"""Horae's Kubernetes resources: the ScheduledJob spec model and the CRDs generated from it.

`crds()` is the single source of the manifests in `crds/` and in the chart;
`python -m horae.resources` (`make crds`) writes them and a test fails when the
checked-in YAML differs. The schema mirrors `JobSpec`'s rules so the API
server itself refuses what the store would refuse, naming the field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from cronsim.cronsim import SYMBOLIC_DAYS, SYMBOLIC_MONTHS
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from horae.models import (
    TASK_NAME_PATTERN,
    ConcurrencyPolicy,
    JobSpec,
    RetryPolicy,
    payload_size_error,
)
from horae.schedule import EARLIEST_INSTANT, LATEST_INSTANT

GROUP = "horae.dev"
VERSION = "v1alpha1"
CATEGORY = "horae"

MIRRORED_ERROR_CHARS = 1024
"""An Execution resource's `status.error` (`kind: message` of the handler's exception) is
cut to this many characters, ending in `…` when cut: an exception's text is the handler's
to choose, and every mirror is stored in etcd and listed by `kubectl get executions`. The
full text (up to 2,000 characters) stays in Postgres (`horae executions`, the API)."""


class _Camel(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )


class RetrySpec(_Camel):
    max_attempts: int = Field(default=5, ge=1, le=100)
    initial_interval_seconds: float = Field(default=1.0, gt=0, le=3600)
    max_interval_seconds: float = Field(default=300.0, gt=0, le=86400)


class ScheduledJobSpec(_Camel):
    """`spec` of a ScheduledJob, as users write it."""

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


# -- CRD generation ------------------------------------------------------------

_CRON_FIELD = r"[0-9A-Za-z*/,#?-]+"
# The shape: 5 or 6 fields, or a macro (each field's values: CRON_FIELDS).
CRON_SHAPE = (
    r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|"
    + rf"{_CRON_FIELD}( +{_CRON_FIELD}){{4,5}})$"
)


def _cron_field(number: str, stepped: str = "", plain: str = "") -> str:
    """An RE2 pattern (case-insensitive, as cron is) for a comma list of one field's
    items: `*`, a number or a range (or a `stepped` form), with an optional step; or a
    `plain` form. Never stricter than cronsim, which the operator and the API use."""
    base = rf"\*|{number}(?:-{number})?" + (f"|{stepped}" if stepped else "")
    item = rf"(?:(?:{base})(?:/0*[1-9][0-9]*)?" + (f"|{plain}" if plain else "") + ")"
    return rf"(?i)^{item}(?:,{item})*$"


_MONTHS = "|".join(SYMBOLIC_MONTHS)
_DAYS = "|".join(SYMBOLIC_DAYS)


class CronField(NamedTuple):
    pattern: str
    """The field's allowed values, as an RE2 pattern."""
    allowed: str
    """The same, as the message of a value out of range says it."""


CRON_FIELDS = {
    "second": CronField(_cron_field(r"0*[1-5]?[0-9]"), "0-59"),
    "minute": CronField(_cron_field(r"0*[1-5]?[0-9]"), "0-59"),
    "hour": CronField(_cron_field(r"0*(?:2[0-3]|1?[0-9])"), "0-23"),
    "day-of-month": CronField(
        _cron_field(r"0*(?:3[01]|[12][0-9]|[1-9])", stepped="LW|L"), "1-31, L or LW"
    ),
    "month": CronField(_cron_field(rf"(?:0*(?:1[0-2]|[1-9])|{_MONTHS})"), "1-12 or JAN-DEC"),
    "day-of-week": CronField(
        _cron_field(rf"(?:0*[0-7]|{_DAYS})", plain=rf"0*[0-7]L|(?:0*[0-7]|{_DAYS})#0*[1-5]"),
        "0-7 or SUN-SAT, nL or n#1-5",
    ),
}
"""Each cron field's allowed values, checked by CEL at `kubectl apply` (field by field,
so the message names the one that is out of range)."""


def _cron_rules() -> list[dict[str, str]]:
    """One CEL rule per cron field: fields counted from the end (a sixth, first, field is
    seconds); a macro is left to the shape pattern."""
    fields = "self.split(' ').filter(f, f != '')"
    rules = []
    for back, (name, cron_field) in enumerate(reversed(CRON_FIELDS.items())):
        pattern = cron_field.pattern.replace("\\", "\\\\")
        field = f"{fields}[size({fields}) - {back + 1}]"
        guard = f"self.startsWith('@') || size({fields}) < {back + 1}"
        rules.append({
            "rule": f"{guard} || {field}.matches('{pattern}')",
            "message": f"the {name} field must be {cron_field.allowed}",
        })  # fmt: skip
    return rules


TIME_ZONE_SHAPE = r"^(UTC|[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+){0,2})$"


def _int(minimum: int, maximum: int, description: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": maximum, "description": description}


def _instant_rule(field: str) -> dict[str, str]:
    """CEL: the instant within the bounds every entry point applies (`check_instant`)."""
    earliest, latest = (f"{t:%Y-%m-%dT%H:%M:%SZ}" for t in (EARLIEST_INSTANT, LATEST_INSTANT))
    return {
        "rule": f"timestamp(self) >= timestamp('{earliest}') && "
        f"timestamp(self) < timestamp('{latest}')",
        "message": f"{field} must be from {earliest} to before {latest}",
    }


def _condition_schema() -> dict[str, Any]:
    return {
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status"],
            "properties": {
                "type": {"type": "string"},
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "reason": {"type": "string"},
                "message": {"type": "string"},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
            },
        },
    }


def scheduledjob_schema() -> dict[str, Any]:
    spec: dict[str, Any] = {
        "type": "object",
        "required": ["task"],
        "properties": {
            "task": {
                "type": "string",
                "minLength": 1,
                "maxLength": 253,
                "pattern": TASK_NAME_PATTERN,
                "description": "Name of the registered task handler to run.",
            },
            "payload": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "maxProperties": 1000,
                "description": "JSON object passed to the handler.",
            },
            "runAt": {
                "type": "string",
                "format": "date-time",
                "maxLength": 64,
                "x-kubernetes-validations": [_instant_rule("spec.runAt")],
                "description": "Fire once at this instant (RFC 3339 with offset). "
                "Exactly one of runAt and schedule.",
            },
            "schedule": {
                "type": "string",
                "minLength": 1,
                "maxLength": 200,
                "pattern": CRON_SHAPE,
                "x-kubernetes-validations": _cron_rules(),
                "description": "Cron expression: 5 fields, 6 with seconds first, or a macro.",
            },
            "timeZone": {
                "type": "string",
                "maxLength": 64,
                "pattern": TIME_ZONE_SHAPE,
                "default": "UTC",
                "description": "IANA time zone the schedule is evaluated in.",
            },
            "jitterSeconds": _int(0, 3600, "Stable per-job offset spread in [0, jitter)."),
            "suspend": {"type": "boolean", "default": False, "description": "Pause the job."},
            "concurrencyPolicy": {
                "type": "string",
                "enum": [p.value for p in ConcurrencyPolicy],
                "default": "Allow",
            },
            "startingDeadlineSeconds": _int(
                1, 7 * 86400, "An occurrence not started this long after its due time is skipped."
            ),
            "retryPolicy": {
                "type": "object",
                "properties": {
                    "maxAttempts": _int(1, 100, "Attempts before the execution is dead."),
                    "initialIntervalSeconds": {"type": "number", "minimum": 0.001, "maximum": 3600},
                    "maxIntervalSeconds": {"type": "number", "minimum": 0.001, "maximum": 86400},
                },
                "x-kubernetes-validations": [
                    {
                        "rule": "!has(self.initialIntervalSeconds) || !has(self.maxIntervalSeconds)"
                        " || self.maxIntervalSeconds >= self.initialIntervalSeconds",
                        "message": "retryPolicy.maxIntervalSeconds must be >= "
                        "retryPolicy.initialIntervalSeconds",
                        "fieldPath": ".maxIntervalSeconds",
                    }
                ],
            },
            "timeoutSeconds": _int(1, 7 * 86400, "Handler timeout."),
            "historyLimit": _int(0, 1000, "Execution resources kept for this job."),
        },
        "x-kubernetes-validations": [
            {
                "rule": "has(self.runAt) != has(self.schedule)",
                "message": "exactly one of spec.runAt and spec.schedule is required",
            },
        ],
    }
    status = {
        "type": "object",
        "properties": {
            "jobId": {"type": "string"},
            "nextRunAt": {"type": "string", "format": "date-time", "nullable": True},
            "lastRunAt": {"type": "string", "format": "date-time", "nullable": True},
            "lastStatus": {"type": "string", "nullable": True},
            "observedGeneration": {"type": "integer", "format": "int64"},
            "conditions": _condition_schema(),
        },
        "x-kubernetes-preserve-unknown-fields": True,
    }
    return {
        "type": "object",
        "required": ["spec"],
        "properties": {"spec": spec, "status": status},
        "x-kubernetes-validations": [
            {
                "rule": "size(self.metadata.name) <= 63",
                "message": "metadata.name: at most 63 characters (it labels the job's "
                "Executions: horae.dev/job=NAME)",
            },
        ],
    }


def execution_schema() -> dict[str, Any]:
    status = {
        "type": "object",
        "properties": {
            name: {"type": "string", "format": "date-time", "nullable": True}
            for name in ("dueAt", "occurrenceAt", "startedAt", "finishedAt")
        }
        | {
            "executionId": {"type": "string"},
            "jobId": {"type": "string"},
            "attempt": {"type": "integer"},
            "status": {"type": "string"},
            "duration": {"type": "string", "nullable": True},
            "error": {"type": "string", "nullable": True, "maxLength": MIRRORED_ERROR_CHARS},
        },
    }
    return {"type": "object", "properties": {"status": status}}


RESERVED_POOL_ENV = ("HORAE_POOL", "HORAE_POOL_NAMESPACE", "HORAE_TENANTS")
"""Which pool and tenants a WorkerPool's workers serve: the operator sets them, never the
pool's `env` (horae/operator/workerpool/deployment.py)."""

DNS_LABEL = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def workerpool_schema() -> dict[str, Any]:
    spec = {
        "type": "object",
        "required": ["image", "tasks"],
        "properties": {
            "image": {"type": "string", "minLength": 1, "maxLength": 512},
            "tasks": {
                "type": "string",
                "minLength": 1,
                "maxLength": 253,
                "description": "Python module with the @task handlers (--tasks).",
            },
            "minReplicas": _int(0, 1000, "Replicas when the queue is empty.") | {"default": 1},
            "maxReplicas": _int(1, 1000, "Upper bound of replicas.") | {"default": 10},
            "targetBacklogPerReplica": _int(1, 1_000_000, "Ready messages per replica.")
            | {"default": 100},
            "concurrency": _int(1, 10_000, "Handlers per worker."),
            "resources": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "env": {
                "type": "array",
                "maxItems": 500,
                "items": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {"name": {"type": "string", "maxLength": 256}},
                },
                "x-kubernetes-validations": [
                    {
                        "rule": "self.all(e, !has(e.name) || !(e.name in "
                        f"{list(RESERVED_POOL_ENV)}))",
                        "message": "spec.env may not set "
                        f"{', '.join(RESERVED_POOL_ENV)}: the operator sets which pool "
                        "and tenants a worker serves",
                    },
                ],
            },
            "serviceAccountName": {
                "type": "string",
                "maxLength": 253,
                "description": "ServiceAccount the workers run as; it must carry the label"
                " horae.dev/worker=true (set by whoever manages ServiceAccounts in the"
                " namespace), or the operator refuses the pool. Default: the namespace's"
                " default ServiceAccount.",
            },
            "automountServiceAccountToken": {
                "type": "boolean",
                "default": False,
                "description": "Mount the ServiceAccount's token in the workers' pods (off:"
                " workers need no Kubernetes API).",
            },
            "tenants": {
                "type": "array",
                "maxItems": 1000,
                "x-kubernetes-list-type": "set",
                "items": {"type": "string", "maxLength": 63, "pattern": DNS_LABEL},
                "description": "Namespaces whose executions this pool's workers run. Honoured "
                "only for a pool in Horae's own namespace (a cluster administrator's shared "
                "pool); a pool elsewhere that sets it is refused (Ready=False, "
                "TenantsNotAllowed). Unset: the pool's own namespace.",
            },
        },
        "x-kubernetes-validations": [
            {
                "rule": "!has(self.minReplicas) || !has(self.maxReplicas) || "
                "self.minReplicas <= self.maxReplicas",
                "message": "spec.minReplicas must be <= spec.maxReplicas",
                "fieldPath": ".minReplicas",
            },
        ],
    }
    status = {
        "type": "object",
        "properties": {
            "queueDepth": {"type": "integer", "description": "Ready messages on the pool's queue."},
            "desiredReplicas": {"type": "integer", "description": "What the queue depth asks for."},
            "replicas": {"type": "integer", "description": "The Deployment's spec.replicas."},
            "readyReplicas": {"type": "integer", "description": "Worker pods ready."},
            "lastScaleTime": {"type": "string", "format": "date-time", "nullable": True},
            "conditions": _condition_schema(),
        },
        "x-kubernetes-preserve-unknown-fields": True,
    }
    return {"type": "object", "required": ["spec"], "properties": {"spec": spec, "status": status}}


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

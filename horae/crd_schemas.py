"""The OpenAPI v3 schemas of Horae's CRDs: what kube-apiserver checks at `kubectl apply`,
field by field, so that a manifest the store would refuse is refused there, naming the
field. Bounds come from `horae.domain.limits` (the numbers `JobSpec` and `RetryPolicy`
obey), CEL rules and patterns from `horae.cel`; `horae.resources` makes the CRDs of them.
"""

from __future__ import annotations

from typing import Any

from horae.cel import CRON_SHAPE, TIME_ZONE_SHAPE, conditions_schema, cron_rules, instant_rule
from horae.cel import integer as _int
from horae.domain.limits import (
    A_WEEK_SECONDS,
    CRON_MAX_CHARS,
    MAX_JITTER_SECONDS,
    RETRY_LIMITS,
    TASK_NAME_MAX_CHARS,
    TASK_NAME_PATTERN,
    TIME_ZONE_MAX_CHARS,
)
from horae.models import ConcurrencyPolicy

MIRRORED_ERROR_CHARS = 1024
"""An Execution resource's `status.error` (`kind: message` of the handler's exception) is
cut to this many characters, ending in `…` when cut: an exception's text is the handler's
to choose, and every mirror is stored in etcd and listed by `kubectl get executions`. The
full text (up to 2,000 characters) stays in Postgres (`horae executions`, the API)."""


RESERVED_POOL_ENV = ("HORAE_POOL", "HORAE_POOL_NAMESPACE", "HORAE_TENANTS")
"""Which pool and tenants a WorkerPool's workers serve: the operator sets them, never the
pool's `env` (the operator's WorkerPool Deployment)."""

DNS_LABEL = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def _when_properties() -> dict[str, Any]:
    """`spec.runAt`, `spec.schedule` and `spec.timeZone`: when a ScheduledJob fires."""
    return {
        "runAt": {
            "type": "string",
            "format": "date-time",
            "maxLength": 64,
            "x-kubernetes-validations": [instant_rule("spec.runAt")],
            "description": "Fire once at this instant (RFC 3339 with offset). "
            "Exactly one of runAt and schedule.",
        },
        "schedule": {
            "type": "string",
            "minLength": 1,
            "maxLength": CRON_MAX_CHARS,
            "pattern": CRON_SHAPE,
            "x-kubernetes-validations": cron_rules(),
            "description": "Cron expression: 5 fields, 6 with seconds first, or a macro.",
        },
        "timeZone": {
            "type": "string",
            "maxLength": TIME_ZONE_MAX_CHARS,
            "pattern": TIME_ZONE_SHAPE,
            "default": "UTC",
            "description": "IANA time zone the schedule is evaluated in.",
        },
    }


def _retry_policy_schema() -> dict[str, Any]:
    """`spec.retryPolicy`: RetryPolicy's bounds. An interval is above 0, which an
    inclusive OpenAPI minimum writes as a millisecond."""
    return {
        "type": "object",
        "properties": {
            "maxAttempts": _int(
                1, RETRY_LIMITS.max_attempts, "Attempts before the execution is dead."
            ),
            "initialIntervalSeconds": {
                "type": "number",
                "minimum": 0.001,
                "maximum": RETRY_LIMITS.initial_interval_seconds,
            },
            "maxIntervalSeconds": {
                "type": "number",
                "minimum": 0.001,
                "maximum": RETRY_LIMITS.max_interval_seconds,
            },
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
    }


def _scheduledjob_spec_schema() -> dict[str, Any]:
    task = {
        "type": "string",
        "minLength": 1,
        "maxLength": TASK_NAME_MAX_CHARS,
        "pattern": TASK_NAME_PATTERN,
        "description": "Name of the registered task handler to run.",
    }
    payload = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "maxProperties": 1000,
        "description": "JSON object passed to the handler.",
    }
    deadline = "An occurrence not started this long after its due time is skipped."
    return {
        "type": "object",
        "required": ["task"],
        "properties": {"task": task, "payload": payload}
        | _when_properties()
        | {
            "jitterSeconds": _int(
                0, MAX_JITTER_SECONDS, "Stable per-job offset spread in [0, jitter)."
            ),
            "suspend": {"type": "boolean", "default": False, "description": "Pause the job."},
            "concurrencyPolicy": {
                "type": "string",
                "enum": [p.value for p in ConcurrencyPolicy],
                "default": "Allow",
            },
            "startingDeadlineSeconds": _int(1, A_WEEK_SECONDS, deadline),
            "retryPolicy": _retry_policy_schema(),
            "timeoutSeconds": _int(1, A_WEEK_SECONDS, "Handler timeout."),
            "historyLimit": _int(0, 1000, "Execution resources kept for this job."),
        },
        "x-kubernetes-validations": [
            {
                "rule": "has(self.runAt) != has(self.schedule)",
                "message": "exactly one of spec.runAt and spec.schedule is required",
            },
        ],
    }


def scheduledjob_schema() -> dict[str, Any]:
    status = {
        "type": "object",
        "properties": {
            "jobId": {"type": "string"},
            "nextRunAt": {"type": "string", "format": "date-time", "nullable": True},
            "lastRunAt": {"type": "string", "format": "date-time", "nullable": True},
            "lastStatus": {"type": "string", "nullable": True},
            "observedGeneration": {"type": "integer", "format": "int64"},
            "conditions": conditions_schema(),
        },
        "x-kubernetes-preserve-unknown-fields": True,
    }
    return {
        "type": "object",
        "required": ["spec"],
        "properties": {"spec": _scheduledjob_spec_schema(), "status": status},
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


def _pool_env_schema() -> dict[str, Any]:
    """`spec.env`: the workers' environment, less what the operator sets itself."""
    return {
        "type": "array",
        "maxItems": 500,
        "items": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {"name": {"type": "string", "maxLength": 256}},
        },
        "x-kubernetes-validations": [
            {
                "rule": f"self.all(e, !has(e.name) || !(e.name in {list(RESERVED_POOL_ENV)}))",
                "message": "spec.env may not set "
                f"{', '.join(RESERVED_POOL_ENV)}: the operator sets which pool "
                "and tenants a worker serves",
            },
        ],
    }


def _pool_access_properties() -> dict[str, Any]:
    """Whose workers these are: the ServiceAccount they run as, and the tenants served."""
    return {
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
    }


def _workerpool_spec_schema() -> dict[str, Any]:
    backlog = _int(1, 1_000_000, "Ready messages per replica.") | {"default": 100}
    return {
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
            "targetBacklogPerReplica": backlog,
            "concurrency": _int(1, 10_000, "Handlers per worker."),
            "resources": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "env": _pool_env_schema(),
        }
        | _pool_access_properties(),
        "x-kubernetes-validations": [
            {
                "rule": "!has(self.minReplicas) || !has(self.maxReplicas) || "
                "self.minReplicas <= self.maxReplicas",
                "message": "spec.minReplicas must be <= spec.maxReplicas",
                "fieldPath": ".minReplicas",
            },
        ],
    }


def workerpool_schema() -> dict[str, Any]:
    status = {
        "type": "object",
        "properties": {
            "queueDepth": {"type": "integer", "description": "Ready messages on the pool's queue."},
            "desiredReplicas": {"type": "integer", "description": "What the queue depth asks for."},
            "replicas": {"type": "integer", "description": "The Deployment's spec.replicas."},
            "readyReplicas": {"type": "integer", "description": "Worker pods ready."},
            "lastScaleTime": {"type": "string", "format": "date-time", "nullable": True},
            "conditions": conditions_schema(),
        },
        "x-kubernetes-preserve-unknown-fields": True,
    }
    spec = _workerpool_spec_schema()
    return {"type": "object", "required": ["spec"], "properties": {"spec": spec, "status": status}}

"""The OpenAPI v3 schemas of Horae's CRDs: what kube-apiserver checks at `kubectl apply`,
field by field, so that a manifest the store would refuse is refused there, naming the
field. Bounds come from `horae.domain.limits` (the numbers `JobSpec` and `RetryPolicy`
obey), CEL rules and patterns from `horae.cel`; `horae.resources` makes the CRDs of them.
"""

from __future__ import annotations

from typing import Any

from horae.cel import CRON_SHAPE, TIME_ZONE_SHAPE, conditions_schema, cron_rules, instant_rule
from horae.cel import integer as _int
from horae.domain.backfills import DEFAULT_RATE, MAX_RATE, Overlap
from horae.domain.durations import DURATION_PATTERN, format_duration
from horae.domain.limits import (
    A_WEEK_SECONDS,
    CRON_MAX_CHARS,
    MAX_CATCH_UP_RUNS,
    MAX_CATCH_UP_WINDOW_SECONDS,
    MAX_JITTER_SECONDS,
    MAX_PAUSE_AFTER_FAILURES,
    MAX_RESULT_BYTES,
    RESULT_DROPPED_KEY,
    RETRY_LIMITS,
    TASK_NAME_MAX_CHARS,
    TASK_NAME_PATTERN,
    TIME_ZONE_MAX_CHARS,
)
from horae.models import CatchUpPolicy, ConcurrencyPolicy

MIRRORED_ERROR_CHARS = 1024
"""An Execution resource's `status.error` (`kind: message` of the handler's exception) is
cut to this many characters, ending in `…` when cut: an exception's text is the handler's
to choose, and every mirror is stored in etcd and listed by `kubectl get executions`. The
full text (up to 2,000 characters) stays in Postgres (`horae executions`, the API)."""

MIRRORED_RESULT_CHARS = 1024
"""An Execution resource's `status.result` (the handler's return value as compact JSON) is
cut to this many characters, ending in `…` and with `status.resultTruncated` true when cut,
for the same reasons as `MIRRORED_ERROR_CHARS`; the whole result (up to 64 KiB of JSON)
stays in Postgres."""


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
            "description": "Run once, at this instant (RFC 3339 with an offset, e.g."
            " 2030-01-01T09:00:00Z). Exactly one of runAt and schedule.",
        },
        "schedule": {
            "type": "string",
            "minLength": 1,
            "maxLength": CRON_MAX_CHARS,
            "pattern": CRON_SHAPE,
            "x-kubernetes-validations": cron_rules(),
            "description": "Run on this cron schedule, evaluated in timeZone: 5 fields"
            " (minute hour day-of-month month day-of-week), 6 with seconds first, or a"
            " macro (@hourly, @daily, @weekly, @monthly, @yearly). Exactly one of runAt and"
            " schedule.",
        },
        "timeZone": {
            "type": "string",
            "maxLength": TIME_ZONE_MAX_CHARS,
            "pattern": TIME_ZONE_SHAPE,
            "default": "UTC",
            "description": "IANA time zone the schedule is evaluated in (e.g."
            " Europe/London); around daylight-saving jumps it runs as Debian's cron does."
            " Default UTC.",
        },
    }


def _retry_policy_schema() -> dict[str, Any]:
    """`spec.retryPolicy`: RetryPolicy's bounds. An interval is above 0, which an
    inclusive OpenAPI minimum writes as a millisecond."""
    return {
        "type": "object",
        "description": "How a failed or timed-out attempt is retried: after a random delay"
        " (full jitter) of up to initialIntervalSeconds, doubling at each attempt up to"
        " maxIntervalSeconds, until maxAttempts attempts in all; the last one failing, the"
        " execution is Dead (dead-lettered, a Warning Event ExecutionDead).",
        "properties": {
            "maxAttempts": _int(
                1,
                RETRY_LIMITS.max_attempts,
                "Attempts in all, the first one included, before the execution is Dead. Default 5.",
            ),
            "initialIntervalSeconds": {
                "type": "number",
                "minimum": 0.001,
                "maximum": RETRY_LIMITS.initial_interval_seconds,
                "description": "Longest delay before the second attempt, in seconds; it"
                " doubles at each further attempt. Default 1.",
            },
            "maxIntervalSeconds": {
                "type": "number",
                "minimum": 0.001,
                "maximum": RETRY_LIMITS.max_interval_seconds,
                "description": "Longest delay between two attempts, in seconds (at least"
                " initialIntervalSeconds). Default 300.",
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


def _failure_policy_schema() -> dict[str, Any]:
    """`spec.failurePolicy`: when the job pauses itself."""
    return {
        "type": "object",
        "description": "Pause the job after pauseAfterConsecutiveFailures executions in a row"
        " ended Failed, TimedOut or Dead (each counted once its retries are over; a Succeeded"
        " one resets the count): Suspended=True and Ready=False with reason TooManyFailures,"
        " a Warning Event TooManyFailures. This pause wins over spec.suspend false: set"
        " spec.suspend true, then false again, to resume it.",
        "required": ["pauseAfterConsecutiveFailures"],
        "properties": {
            "pauseAfterConsecutiveFailures": _int(
                1,
                MAX_PAUSE_AFTER_FAILURES,
                "Consecutive failed executions after which the job is paused.",
            ),
        },
        "x-kubernetes-validations": [
            {
                "rule": "self.pauseAfterConsecutiveFailures >= 1 && "
                f"self.pauseAfterConsecutiveFailures <= {MAX_PAUSE_AFTER_FAILURES}",
                "message": "failurePolicy.pauseAfterConsecutiveFailures must be 1 to "
                f"{MAX_PAUSE_AFTER_FAILURES}",
                "fieldPath": ".pauseAfterConsecutiveFailures",
            }
        ],
    }


HISTORY_MAX = 1000
"""Execution resources a ScheduledJob may keep, by any of its history limits."""

DEFAULT_SUCCESSFUL_HISTORY = 3
DEFAULT_FAILED_HISTORY = 1
"""A CronJob's defaults, taken when a ScheduledJob sets only the other of the two limits."""


def _history_properties() -> dict[str, Any]:
    """How many Execution resources a ScheduledJob keeps: Horae's one limit, or a CronJob's
    two (for a manifest migrated from a CronJob)."""
    return {
        "historyLimit": _int(
            0,
            HISTORY_MAX,
            "Execution resources kept for this job: its newest dispatched executions,"
            " whatever their status. Default 10 (when neither CronJob-style limit is set);"
            " Horae's store keeps the whole history whatever the limit. Not together with"
            " successfulJobsHistoryLimit or failedJobsHistoryLimit.",
        ),
        "successfulJobsHistoryLimit": _int(
            0,
            HISTORY_MAX,
            "As a CronJob's: Succeeded executions kept as Execution resources (queued and"
            f" running ones are always kept). Default {DEFAULT_SUCCESSFUL_HISTORY} when only"
            " failedJobsHistoryLimit is set. Not together with historyLimit.",
        ),
        "failedJobsHistoryLimit": _int(
            0,
            HISTORY_MAX,
            "As a CronJob's: executions that ended otherwise (Failed, TimedOut, Dead,"
            " Cancelled, Skipped) kept as Execution resources. Default"
            f" {DEFAULT_FAILED_HISTORY} when only successfulJobsHistoryLimit is set. Not"
            " together with historyLimit.",
        ),
    }


def _catch_up_schema() -> dict[str, Any]:
    """`spec.catchUp`: what runs of the occurrences missed in a gap (docs/architecture.md)."""
    longest = format_duration(MAX_CATCH_UP_WINDOW_SECONDS)
    # RE2 in CEL: the pattern again, so that duration() never sees what it cannot read.
    shape = DURATION_PATTERN.replace("\\", "\\\\")
    return {
        "type": "object",
        "description": "What runs of the occurrences missed in a gap (the scheduler away"
        " for longer than a few seconds, or the job suspended); those that do not run are"
        " recorded as Skipped executions, with the reason.",
        "properties": {
            "policy": {
                "type": "string",
                "enum": [p.value for p in CatchUpPolicy],
                "default": CatchUpPolicy.LATEST.value,
                "description": "Skip runs none of them; Latest the most recent (as a"
                f" CronJob does); All every one, the newest {MAX_CATCH_UP_RUNS} at most,"
                " oldest first. Default Latest.",
            },
            "window": {
                "type": "string",
                "minLength": 2,
                "maxLength": 24,
                "pattern": DURATION_PATTERN,
                "x-kubernetes-validations": [
                    {
                        "rule": f"!self.matches('{shape}') || (duration(self) > duration('0s')"
                        f" && duration(self) <= duration('{longest}'))",
                        "message": f"spec.catchUp.window must be from 1s to {longest} (31 days)",
                    }
                ],
                "description": "Only occurrences due within this long before the scheduler"
                " catches up run (e.g. 90s, 15m, 1h30m; at most"
                f" {longest}). Unset: no limit.",
            },
        },
    }


HISTORY_RULE = {
    "rule": "!has(self.historyLimit) || "
    "!(has(self.successfulJobsHistoryLimit) || has(self.failedJobsHistoryLimit))",
    "message": "spec.historyLimit cannot be combined with spec.successfulJobsHistoryLimit or "
    "spec.failedJobsHistoryLimit: set historyLimit (the newest executions of any status) or "
    "the CronJob-style pair",
    "fieldPath": ".historyLimit",
}


def _scheduledjob_spec_schema() -> dict[str, Any]:
    task = {
        "type": "string",
        "minLength": 1,
        "maxLength": TASK_NAME_MAX_CHARS,
        "pattern": TASK_NAME_PATTERN,
        "description": "Name of the task to run, as its handler is registered with"
        " @task(NAME) in the workers of a WorkerPool of this namespace.",
    }
    payload = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "maxProperties": 1000,
        "description": "JSON object handed to the handler (at most 256 KiB serialized;"
        " the operator refuses a larger one, Ready=False InvalidSpec). Default {}.",
    }
    return {
        "type": "object",
        "description": "What runs (task, payload), when (runAt or schedule), and how"
        " (retries, timeout, concurrency, history).",
        "required": ["task"],
        "properties": {"task": task, "payload": payload}
        | _when_properties()
        | {
            "jitterSeconds": _int(
                0,
                MAX_JITTER_SECONDS,
                "Delay every occurrence by the same per-job offset in [0, jitterSeconds)"
                " seconds, to spread jobs that share a schedule. Default 0.",
            ),
            "suspend": {
                "type": "boolean",
                "default": False,
                "description": "Pause the job: what was scheduled is cancelled and nothing"
                " runs until it is false again (then it runs from now on). Default false.",
            },
            "concurrencyPolicy": {
                "type": "string",
                "enum": [p.value for p in ConcurrencyPolicy],
                "default": "Allow",
                "description": "When an occurrence is due while the previous one still runs:"
                " Allow runs both, Forbid skips the new one (Skipped), Replace cancels the"
                " running one (its worker is told at once), BufferOne lets the new one wait"
                " and run when the previous one ends, skipping any due while one waits"
                " (Skipped, reason buffer_one). Default Allow.",
            },
            "startingDeadlineSeconds": _int(
                1,
                A_WEEK_SECONDS,
                "An occurrence not started this many seconds after it was due is skipped"
                " (Skipped). Unset: no deadline.",
            ),
            "catchUp": _catch_up_schema(),
            "retryPolicy": _retry_policy_schema(),
            "failurePolicy": _failure_policy_schema(),
            "timeoutSeconds": _int(
                1,
                A_WEEK_SECONDS,
                "Seconds an attempt's handler may run before it is cancelled and the attempt"
                " is TimedOut (and retried per retryPolicy). Unset: no timeout.",
            ),
        }
        | _history_properties(),
        "x-kubernetes-validations": [
            {
                "rule": "has(self.runAt) != has(self.schedule)",
                "message": "exactly one of spec.runAt and spec.schedule is required",
            },
            HISTORY_RULE,
        ],
    }


TRIGGER_ANNOTATION = "horae.dev/trigger"
"""A ScheduledJob's run-now: each new value of this annotation runs the job once, now."""

TRIGGER_MAX_CHARS = 253
"""The longest trigger value the operator runs (the store's column says the same)."""

PAUSE_REASON_ANNOTATION = "horae.dev/pause-reason"
"""Why a ScheduledJob is suspended: read when spec.suspend becomes true, shown as the job's
paused reason (status.pausedReason, the Suspended condition's message). At most
PAUSE_REASON_MAX_CHARS characters; a longer one is refused (Warning Event
PauseReasonRefused) and the job is suspended without a reason."""


def _instant(description: str) -> dict[str, Any]:
    """An RFC 3339 time a status may not have yet."""
    return {"type": "string", "format": "date-time", "nullable": True, "description": description}


def _scheduledjob_status_schema() -> dict[str, Any]:
    last_trigger = {
        "type": "object",
        "description": f"The last {TRIGGER_ANNOTATION} annotation value the operator handled:"
        " a new value runs the job once, now (a manual execution); the same value again"
        " runs nothing.",
        "properties": {
            "value": {"type": "string", "description": "The annotation's value."},
            "executionId": {
                "type": "string",
                "nullable": True,
                "description": "The manual execution it started; unset when it started"
                " none (the value the ScheduledJob was created with, or a job that was"
                " suspended: a Warning Event TriggerRefused says so).",
            },
            "time": _instant("When the operator handled it."),
        },
    }
    return {
        "type": "object",
        "description": "What the operator and Horae's store report; written by the operator only.",
        "properties": {
            "jobId": {
                "type": "string",
                "description": "The job's id in Horae's store (the resource's uid): what"
                " `horae jobs get` and the HTTP API name it by.",
            },
            "nextRunAt": _instant(
                "When the next occurrence is due (nominal, before jitter). Unset when"
                " nothing is scheduled: suspended, or a one-off that has run."
            ),
            "lastRunAt": _instant("When the latest attempt's outcome was recorded."),
            "lastStatus": {
                "type": "string",
                "nullable": True,
                "description": "How the latest attempt ended: Succeeded, Failed, TimedOut,"
                " Dead, Cancelled or Skipped.",
            },
            "lastScheduleTime": _instant(
                "As a CronJob's: the nominal time of the newest scheduled occurrence that was"
                " dispatched to a worker (manual runs and retries left out)."
            ),
            "lastSuccessfulTime": _instant(
                "As a CronJob's: when the newest Succeeded execution finished."
            ),
            "lastTrigger": last_trigger,
            "pausedReason": {
                "type": "string",
                "nullable": True,
                "description": "Why the job is paused: the"
                f" {PAUSE_REASON_ANNOTATION} annotation's value when spec.suspend became"
                " true, or the failures failurePolicy paused it for. Unset when it runs.",
            },
            "consecutiveFailures": {
                "type": "integer",
                "description": "Executions in a row that ended Failed, TimedOut or Dead"
                " (each counted once its retries are over) since the last Succeeded one.",
            },
            "observedGeneration": {
                "type": "integer",
                "format": "int64",
                "description": "The metadata.generation of the spec the operator last"
                " acted on (stored, or refused).",
            },
            "conditions": conditions_schema(
                "Ready (True: the job is stored and runs as its spec says; False: why not,"
                " e.g. InvalidSpec, QuotaExceeded, TooManyFailures), Suspended (spec.suspend,"
                " or TooManyFailures: failurePolicy paused it), and Failing"
                " (True while the latest attempt failed, timed out or is dead)."
            ),
        },
        "x-kubernetes-preserve-unknown-fields": True,
    }


def scheduledjob_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "A task run once at runAt or on a cron schedule by Horae's workers;"
        " every run is an Execution (kubectl get executions -l horae.dev/job=NAME).",
        "required": ["spec"],
        "properties": {
            "spec": _scheduledjob_spec_schema(),
            "status": _scheduledjob_status_schema(),
        },
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
        "description": "The execution as Horae's store records it (written by the operator).",
        "properties": {
            "executionId": {
                "type": "string",
                "description": "The execution's id in Horae's store (`horae executions`,"
                " GET /executions/{id}).",
            },
            "jobId": {"type": "string", "description": "Its job's id (the ScheduledJob's uid)."},
            "attempt": {
                "type": "integer",
                "description": "Which attempt of its occurrence it is: 1, then one more per retry.",
            },
            "status": {
                "type": "string",
                "description": "Queued, Running, Succeeded, Failed, TimedOut, Cancelled,"
                " Skipped or Dead.",
            },
            "manual": {
                "type": "boolean",
                "description": "Its occurrence was run by hand (the horae.dev/trigger"
                " annotation, `horae jobs trigger`, POST /jobs/{id}:trigger), not by the"
                " schedule; so are its retries.",
            },
            "occurrenceAt": _instant(
                "The nominal time of the occurrence it runs (shared by its retries)."
            ),
            "dueAt": _instant(
                "When it was due to start: the occurrence's time plus the job's jitter, or a"
                " retry's backoff."
            ),
            "startedAt": _instant("When a worker started its handler."),
            "finishedAt": _instant("When it ended."),
            "duration": {
                "type": "string",
                "nullable": True,
                "description": "How long its handler ran, in seconds (e.g. 1.234s).",
            },
            "error": {
                "type": "string",
                "nullable": True,
                "maxLength": MIRRORED_ERROR_CHARS,
                "description": "Why it failed: the error's kind, then its message (cut to"
                f" {MIRRORED_ERROR_CHARS} characters; Horae's store keeps it whole).",
            },
            "result": {
                "type": "string",
                "nullable": True,
                "maxLength": MIRRORED_RESULT_CHARS,
                "description": "What a Succeeded attempt's handler returned, as compact JSON"
                f" text, cut to {MIRRORED_RESULT_CHARS} characters (ending in …, and"
                " resultTruncated true); Horae's store keeps it whole (`horae executions -o"
                f" json`), up to {MAX_RESULT_BYTES // 1024} KiB: a larger or non-JSON value"
                f' is stored as {{"{RESULT_DROPPED_KEY}": "<why>"}}.',
            },
            "resultTruncated": {
                "type": "boolean",
                "description": "Whether result was cut short here.",
            },
        },
    }
    return {
        "type": "object",
        "description": "One run (attempt) of a ScheduledJob, mirrored from Horae's store by"
        " the operator; its ScheduledJob's history limits decide how many are kept.",
        "properties": {"status": status},
    }


def _pool_env_schema() -> dict[str, Any]:
    """`spec.env`: the workers' environment, less what the operator sets itself."""
    return {
        "type": "array",
        "maxItems": 500,
        "description": "Environment variables of the worker container, as in a Pod spec"
        f" (name with value or valueFrom); {', '.join(RESERVED_POOL_ENV)} are the"
        " operator's.",
        "items": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {
                "name": {"type": "string", "maxLength": 256, "description": "The variable."}
            },
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


def _pool_placement_properties() -> dict[str, Any]:
    """Where the workers' pods go and what they carry, as in a Pod spec."""

    def strings(description: str) -> dict[str, Any]:
        return {
            "type": "object",
            "maxProperties": 64,
            "additionalProperties": {"type": "string", "maxLength": 4096},
            "description": description,
        }

    def pod_list(description: str) -> dict[str, Any]:
        return {
            "type": "array",
            "maxItems": 32,
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "description": description,
        }

    return {
        "podAnnotations": strings(
            "Annotations of the workers' pods (e.g. for a service mesh or a log shipper)."
        ),
        "priorityClassName": {
            "type": "string",
            "maxLength": 253,
            "description": "PriorityClass of the workers' pods, as in a Pod spec.",
        },
        "nodeSelector": strings("Node labels the workers' pods require, as in a Pod spec."),
        "tolerations": pod_list("Tolerations of the workers' pods, as in a Pod spec."),
        "topologySpreadConstraints": pod_list(
            "How the workers' pods spread over zones or nodes, as in a Pod spec; a constraint"
            " without a labelSelector spreads this pool's pods (horae.dev/workerpool=NAME)."
        ),
    }


AUTOSCALING_MODES = ("Builtin", "External")
"""Who sets a WorkerPool's spec.replicas: the operator's autoscaler, or someone else."""


def _pool_scaling_properties() -> dict[str, Any]:
    """How many workers run, and who decides."""
    backlog = _int(
        1,
        1_000_000,
        "Ready messages on the pool's queue per replica that the built-in autoscaler aims at:"
        " replicas = ceil(ready / targetBacklogPerReplica). Default 100.",
    )
    return {
        "replicas": _int(
            0,
            1000,
            "Worker replicas to run: the pool's Deployment always gets this figure. With"
            " autoscaling Builtin the operator's autoscaler writes it; with External,"
            " whoever scales the pool does (kubectl scale workerpool, an HPA, a KEDA"
            " ScaledObject: the scale subresource). Unset: the operator fills it in (the"
            " Deployment's replicas, or minReplicas for a new pool).",
        ),
        "autoscaling": {
            "type": "string",
            "enum": list(AUTOSCALING_MODES),
            "default": AUTOSCALING_MODES[0],
            "description": "Who sets spec.replicas. Builtin (default): the operator's"
            " autoscaler, from the pool queue's depth within minReplicas..maxReplicas, at"
            " once upwards and downwards only after the stabilization window (a replicas"
            " figure set by hand meanwhile lasts until then). External: whoever scales the"
            " pool (kubectl scale, an HPA or KEDA ScaledObject targeting the WorkerPool);"
            " the operator never changes it, and minReplicas, maxReplicas and"
            " targetBacklogPerReplica are not used.",
        },
        "minReplicas": _int(
            0, 1000, "Fewest replicas the built-in autoscaler runs (an empty queue). Default 1."
        )
        | {"default": 1},
        "maxReplicas": _int(1, 1000, "Most replicas the built-in autoscaler runs. Default 10.")
        | {"default": 10},
        "targetBacklogPerReplica": backlog | {"default": 100},
    }


def _workerpool_spec_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "The workers (image, tasks, environment, account), how many run, and"
        " who scales them.",
        "required": ["image", "tasks"],
        "properties": {
            "image": {
                "type": "string",
                "minLength": 1,
                "maxLength": 512,
                "description": "Container image of the workers: Horae's worker image, or one"
                " built on it that holds the tasks module.",
            },
            "tasks": {
                "type": "string",
                "minLength": 1,
                "maxLength": 253,
                "description": "Python module whose @task handlers the workers serve"
                " (horae worker --tasks MODULE).",
            },
        }
        | _pool_scaling_properties()
        | {
            "concurrency": _int(
                1, 10_000, "Handlers each worker runs at once (HORAE_CONCURRENCY). Default 16."
            ),
            "resources": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "description": "The worker container's resources (requests, limits), as in a"
                " Pod spec.",
            },
            "env": _pool_env_schema(),
        }
        | _pool_placement_properties()
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


def _workerpool_status_schema() -> dict[str, Any]:
    def count(description: str) -> dict[str, Any]:
        return {"type": "integer", "format": "int32", "description": description}

    return {
        "type": "object",
        "description": "What the operator saw and did at its last look (every few seconds).",
        "properties": {
            "queueDepth": count("Ready messages on the pool's queue."),
            "desiredReplicas": count(
                "Replicas the pool is asked for: with autoscaling Builtin, what the queue"
                " depth asks for (fewer than now: followed after the stabilization window);"
                " with External, spec.replicas."
            ),
            "replicas": count(
                "Replicas of the pool's Deployment (its spec.replicas): what the scale"
                " subresource reports as the pool's."
            ),
            "readyReplicas": count("Worker pods ready."),
            "selector": {
                "type": "string",
                "description": "Label selector of the pool's pods (horae.dev/workerpool=NAME),"
                " which an HPA reads through the scale subresource.",
            },
            "lastScaleTime": {
                "type": "string",
                "format": "date-time",
                "nullable": True,
                "description": "When the operator last changed the Deployment's replicas.",
            },
            "observedGeneration": {
                "type": "integer",
                "format": "int64",
                "description": "The metadata.generation of the spec the operator last acted on.",
            },
            "conditions": conditions_schema(
                "Ready (True: the Deployment is applied; False: why the pool is refused, e.g."
                " ServiceAccountNotAllowed, DeploymentNotOwned, TenantsNotAllowed) and Scaling"
                " (True while a scale-down waits out the stabilization window; its reason says"
                " what holds the replicas)."
            ),
        },
        "x-kubernetes-preserve-unknown-fields": True,
    }


def workerpool_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "Workers that run this namespace's executions: a Deployment the"
        " operator keeps, scaled on the pool's queue (or by kubectl scale, an HPA or KEDA"
        " through the scale subresource).",
        "required": ["spec"],
        "properties": {"spec": _workerpool_spec_schema(), "status": _workerpool_status_schema()},
    }


BACKFILL_PHASES = ("Pending", "Running", "Completed", "Cancelled", "Failed")
"""A Backfill's `status.phase`: Pending until the operator made its backfill in the store
(its ScheduledJob not found yet), Running while it is fed and its executions run, then
Completed, Cancelled (`spec.cancel`, or its ScheduledJob deleted) or Failed (refused)."""

_BACKFILL_IMMUTABLE = ("scheduledJob", "from", "to", "rate", "overlap")


def _backfill_spec_schema() -> dict[str, Any]:
    def instant(field: str, description: str) -> dict[str, Any]:
        return {
            "type": "string",
            "format": "date-time",
            "maxLength": 64,
            "x-kubernetes-validations": [instant_rule(f"spec.{field}")],
            "description": description,
        }

    unchanged = " && ".join(f"self.{f} == oldSelf.{f}" for f in _BACKFILL_IMMUTABLE)
    return {
        "type": "object",
        "description": "Which ScheduledJob's past occurrences to run now, and how fast.",
        "required": ["scheduledJob", "from", "to"],
        "properties": {
            "scheduledJob": {
                "type": "string",
                "minLength": 1,
                "maxLength": 253,
                "description": "The ScheduledJob (in this namespace) whose occurrences to run;"
                " it must have a schedule (not runAt).",
            },
            "from": instant("from", "Start of the range (inclusive), RFC 3339 with an offset."),
            "to": instant(
                "to",
                "End of the range (exclusive), RFC 3339 with an offset; at most the time"
                " the Backfill is created (the schedule runs the coming occurrences).",
            ),
            "rate": _int(
                1,
                MAX_RATE,
                f"Occurrences created a second at most. Default {DEFAULT_RATE}: only about a"
                " second's worth is ever queued ahead.",
            )
            | {"default": DEFAULT_RATE},
            "overlap": {
                "type": "string",
                "enum": [o.value for o in Overlap],
                "default": Overlap.ALLOW.value,
                "description": "How the backfilled runs overlap one another: Allow (in"
                " parallel, bounded by the rate) or Forbid (one at a time). They never skip"
                " nor replace the job's scheduled runs.",
            },
            "cancel": {
                "type": "boolean",
                "description": "true cancels the backfill (once set, it stays): nothing more"
                " is created and what was not dispatched yet ends cancelled. Deleting the"
                " Backfill cancels it too.",
            },
        },
        "x-kubernetes-validations": [
            {
                "rule": "timestamp(self.from) < timestamp(self.to)",
                "message": "spec.from must be before spec.to",
                "fieldPath": ".to",
            },
            {
                "rule": unchanged,
                "message": "spec is immutable but for spec.cancel: create another Backfill",
            },
            {
                "rule": "!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) &&"
                " self.cancel)",
                "message": "spec.cancel cannot be undone",
                "fieldPath": ".cancel",
            },
        ],
    }


def _backfill_status_schema() -> dict[str, Any]:
    def count(description: str) -> dict[str, Any]:
        return {"type": "integer", "format": "int32", "description": description}

    return {
        "type": "object",
        "description": "The backfill's progress, as the store holds it (every second or so).",
        "properties": {
            "phase": {
                "type": "string",
                "enum": list(BACKFILL_PHASES),
                "description": "Pending, Running, Completed, Cancelled or Failed.",
            },
            "backfillId": {"type": "string", "description": "The backfill's id in the store."},
            "jobId": {"type": "string", "description": "The ScheduledJob's job id."},
            "total": count("Occurrences of the schedule in the range."),
            "created": count("Executions created so far."),
            "existing": count("Occurrences not backfilled: they had a run already."),
            "succeeded": count("Its executions that succeeded."),
            "failed": count("Its executions that failed, timed out or died."),
            "cancelled": count("Its executions cancelled by the cancel."),
            "progress": {
                "type": "string",
                "description": "Occurrences handled of the total (created or had a run), N/M.",
            },
            "conditions": conditions_schema(
                "Ready (True: the backfill is in the store; False: why not, e.g. JobNotFound,"
                " InvalidSpec, JobNotBackfillable)."
            ),
        },
        "x-kubernetes-preserve-unknown-fields": True,
    }


def backfill_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "A past range of a ScheduledJob's occurrences run now, as executions"
        " tagged with the backfill, at most spec.rate a second.",
        "required": ["spec"],
        "properties": {"spec": _backfill_spec_schema(), "status": _backfill_status_schema()},
    }

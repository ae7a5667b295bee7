"""Horae's Kubernetes resources: the ScheduledJob spec model and the CRDs generated from it.

`crds()` is the single source of the manifests in `crds/` and in the chart;
`python -m horae.resources` (`make crds`) writes them and a test fails when the
checked-in YAML differs. Their schemas (`horae.crd_schemas`) state `JobSpec`'s bounds
(`horae.domain.limits`) so the API server itself refuses what the store would refuse,
naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

# Facts about the resources the operator reads from here (re-exported).
from horae.crd_schemas import AUTOSCALING_MODES as AUTOSCALING_MODES
from horae.crd_schemas import (
    DEFAULT_FAILED_HISTORY,
    DEFAULT_SUCCESSFUL_HISTORY,
    HISTORY_MAX,
    backfill_schema,
    execution_schema,
    scheduledjob_schema,
    workerpool_schema,
)
from horae.crd_schemas import MIRRORED_ERROR_CHARS as MIRRORED_ERROR_CHARS
from horae.crd_schemas import MIRRORED_RESULT_CHARS as MIRRORED_RESULT_CHARS
from horae.crd_schemas import PAUSE_REASON_ANNOTATION as PAUSE_REASON_ANNOTATION
from horae.crd_schemas import RESERVED_POOL_ENV as RESERVED_POOL_ENV
from horae.crd_schemas import TRIGGER_ANNOTATION as TRIGGER_ANNOTATION
from horae.crd_schemas import TRIGGER_MAX_CHARS as TRIGGER_MAX_CHARS
from horae.domain.backfills import DEFAULT_RATE, Overlap
from horae.domain.limits import catch_up_window, payload_size_error
from horae.models import CatchUpPolicy, ConcurrencyPolicy, FailurePolicy, JobSpec, RetryPolicy

GROUP = "horae.dev"
VERSION = "v1alpha1"
CATEGORY = "horae"

_CAMEL = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)
"""A manifest's fields, camelCase (`retryPolicy`), also accepted by their Python names."""


class RetrySpec(RetryPolicy):
    """`spec.retryPolicy`: the job's RetryPolicy (its bounds and defaults), in camelCase."""

    model_config = _CAMEL


class FailureSpec(FailurePolicy):
    """`spec.failurePolicy`: the job's FailurePolicy, in camelCase."""

    model_config = _CAMEL


class CatchUpSpec(BaseModel):
    """`spec.catchUp`: the job's catch-up policy, and its window as a duration (`1h30m`)."""

    model_config = _CAMEL

    policy: CatchUpPolicy = CatchUpPolicy.LATEST
    window: str | None = None

    @field_validator("window")
    @classmethod
    def _window_readable(cls, value: str | None) -> str | None:
        # As the CRD's pattern and CEL rule: a resource stored before them is refused here.
        if value is not None:
            catch_up_window(value)
        return value

    def window_seconds(self) -> int | None:
        return None if self.window is None else catch_up_window(self.window)


DEFAULT_HISTORY_LIMIT = 10
"""Execution resources a ScheduledJob keeps when it sets no history limit."""


@dataclass(frozen=True)
class History:
    """Which of a job's executions its Execution resources show: its `newest` N of any
    status; or, with a CronJob's limits (`newest` None), its queued and running ones, its
    `succeeded` newest Succeeded ones and its `failed` newest that ended otherwise."""

    newest: int | None = DEFAULT_HISTORY_LIMIT
    succeeded: int = 0
    failed: int = 0


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
    failure_policy: FailureSpec | None = None
    timeout_seconds: int | None = None
    catch_up: CatchUpSpec = Field(default_factory=CatchUpSpec)
    history_limit: int | None = Field(default=None, ge=0, le=HISTORY_MAX)
    successful_jobs_history_limit: int | None = Field(default=None, ge=0, le=HISTORY_MAX)
    failed_jobs_history_limit: int | None = Field(default=None, ge=0, le=HISTORY_MAX)

    @model_validator(mode="after")
    def _one_style_of_history(self) -> ScheduledJobSpec:
        # As the CRD's CEL rule (HISTORY_RULE): a resource stored before it is refused here.
        cronjob_style = (self.successful_jobs_history_limit, self.failed_jobs_history_limit)
        if self.history_limit is not None and cronjob_style != (None, None):
            raise ValueError(
                "historyLimit cannot be combined with successfulJobsHistoryLimit or"
                " failedJobsHistoryLimit"
            )
        return self

    def history(self) -> History:
        """Which executions the job's Execution resources show."""
        succeeded, failed = self.successful_jobs_history_limit, self.failed_jobs_history_limit
        if succeeded is None and failed is None:
            limit = self.history_limit
            return History(newest=DEFAULT_HISTORY_LIMIT if limit is None else limit)
        return History(
            newest=None,
            succeeded=DEFAULT_SUCCESSFUL_HISTORY if succeeded is None else succeeded,
            failed=DEFAULT_FAILED_HISTORY if failed is None else failed,
        )

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
            failure_policy=(
                FailurePolicy(**self.failure_policy.model_dump())
                if self.failure_policy is not None
                else None
            ),
            catch_up=self.catch_up.policy,
            catch_up_window_seconds=self.catch_up.window_seconds(),
        )


@dataclass(frozen=True)
class Column:
    """A column of `kubectl get`: its header, type and JSONPath, and what it says (which
    `kubectl get -o wide` and the API's discovery show)."""

    name: str
    type: str
    path: str
    description: str
    wide: bool = False
    """Shown by `kubectl get -o wide` only."""

    def printer_column(self) -> dict[str, Any]:
        column: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "jsonPath": self.path,
            "description": self.description,
        }
        if self.wide:
            column["priority"] = 1
        return column


def _crd(
    kind: str,
    plural: str,
    short: str,
    schema: dict[str, Any],
    columns: list[Column],
    *,
    status: bool = True,
    scale: dict[str, str] | None = None,
) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "additionalPrinterColumns": [c.printer_column() for c in columns],
    }
    if status:
        version["subresources"] = {"status": {}}
    if scale:
        version["subresources"]["scale"] = scale
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


AGE = Column("Age", "date", ".metadata.creationTimestamp", "Time since the resource was created.")

# A `date` column shows the time since an instant: right for an instant past, wrong for one
# to come (kubectl prints a future one as 0s or <invalid>). A ScheduledJob's next run is to
# come, so it is a `string` column, the instant in RFC 3339, UTC; the columns of instants
# past (last schedule, an Execution's due and start times) stay ages.
SCALE = {
    "specReplicasPath": ".spec.replicas",
    "statusReplicasPath": ".status.replicas",
    "labelSelectorPath": ".status.selector",
}
"""A WorkerPool's scale subresource: `kubectl scale`, an HPA or KEDA set spec.replicas."""


def crds() -> list[dict[str, Any]]:
    """Every Horae CRD, in apply order."""
    return [
        _crd(
            "ScheduledJob",
            "scheduledjobs",
            "sj",
            scheduledjob_schema(),
            [
                Column("Task", "string", ".spec.task", "The task the job runs."),
                Column("Schedule", "string", ".spec.schedule", "Its cron schedule."),
                Column(
                    "Time Zone", "string", ".spec.timeZone", "Its schedule's time zone.", wide=True
                ),
                Column("Suspend", "boolean", ".spec.suspend", "Whether it is paused."),
                Column(
                    "Last Schedule",
                    "date",
                    ".status.lastScheduleTime",
                    "Time since its newest scheduled occurrence was dispatched.",
                ),
                Column(
                    "Next Run",
                    "string",
                    ".status.nextRunAt",
                    "When its next occurrence is due (UTC).",
                ),
                Column(
                    "Last Status", "string", ".status.lastStatus", "How its latest attempt ended."
                ),
                Column(
                    "Ready",
                    "string",
                    '.status.conditions[?(@.type=="Ready")].status',
                    "Whether the job is stored as its spec says.",
                    wide=True,
                ),
                AGE,
            ],
        ),
        _crd(
            "Execution",
            "executions",
            "ex",
            execution_schema(),
            [
                Column("Job", "string", ".metadata.labels.horae\\.dev/job", "Its ScheduledJob."),
                Column("Attempt", "integer", ".status.attempt", "Which attempt it is."),
                Column("Status", "string", ".status.status", "Where it stands, or how it ended."),
                Column(
                    "Manual",
                    "boolean",
                    ".status.manual",
                    "Run by hand, not by the schedule.",
                    wide=True,
                ),
                Column("Due", "date", ".status.dueAt", "Time since it was due."),
                Column("Started", "date", ".status.startedAt", "Time since its handler started."),
                Column("Duration", "string", ".status.duration", "How long its handler ran."),
            ],
            status=False,  # written whole by the operator: no spec to guard
        ),
        _crd(
            "WorkerPool",
            "workerpools",
            "wp",
            workerpool_schema(),
            [
                Column("Tasks", "string", ".spec.tasks", "The module of task handlers served."),
                Column(
                    "Autoscaling",
                    "string",
                    ".spec.autoscaling",
                    "Who sets the replicas: Builtin or External.",
                ),
                Column("Replicas", "integer", ".status.replicas", "Replicas of its Deployment."),
                Column("Ready", "integer", ".status.readyReplicas", "Worker pods ready."),
                Column(
                    "Desired", "integer", ".status.desiredReplicas", "Replicas it is asked for."
                ),
                Column("Queue", "integer", ".status.queueDepth", "Ready messages on its queue."),
                AGE,
            ],
            scale=SCALE,
        ),
        _crd(
            "Backfill",
            "backfills",
            "bf",
            backfill_schema(),
            [
                Column("Job", "string", ".spec.scheduledJob", "The ScheduledJob backfilled."),
                Column("From", "string", ".spec.from", "Start of the range (inclusive)."),
                Column("To", "string", ".spec.to", "End of the range (exclusive)."),
                Column("Rate", "integer", ".spec.rate", "Occurrences a second.", wide=True),
                Column(
                    "Progress",
                    "string",
                    ".status.progress",
                    "Occurrences handled (created, or had a run) of the total.",
                ),
                Column("Phase", "string", ".status.phase", "Where it stands."),
                AGE,
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


class BackfillSpec(BaseModel):
    """`spec` of a Backfill, as users write it (the CRD's schema checked it already)."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    scheduled_job: str
    from_at: datetime = Field(alias="from")
    to_at: datetime = Field(alias="to")
    rate: int = DEFAULT_RATE
    overlap: Overlap = Overlap.ALLOW
    cancel: bool = False

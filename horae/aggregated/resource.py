"""The `Execution` resource of group runs.horae.dev: what one execution row looks like to
`kubectl`, as an object and as a table row, and the parts of a request kubectl sends
(names, selectors, continue tokens). Pure functions, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from horae.domain.instants import rfc3339
from horae.models import ExecutionStatus
from horae.store.rows import ExecutionRow

GROUP = "runs.horae.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "Execution"
PLURAL = "executions"
SINGULAR = "execution"
SHORT_NAMES = ("ex",)
CATEGORIES = ("horae",)
JOB_LABEL = "horae.dev/job"
ID_DIGITS = 16
"""Hex digits of the execution id in its name (64 bits: unambiguous within a job)."""

PHASES: dict[ExecutionStatus, str] = {
    status: "".join(part.capitalize() for part in status.value.split("_"))
    for status in ExecutionStatus
    if status != ExecutionStatus.SCHEDULED
}
"""Each shown status's phase (`status.phase`): Queued, Running, Succeeded, Failed,
TimedOut, Cancelled, Skipped, Dead. Scheduled rows (not yet due) are not executions yet."""
_BY_PHASE = {phase: status for status, phase in PHASES.items()}

COLUMNS: tuple[dict[str, Any], ...] = (
    {"name": "Name", "type": "string", "format": "name", "priority": 0,
     "description": "Its ScheduledJob's name, then the first 16 hex digits of its id."},
    {"name": "Job", "type": "string", "format": "", "priority": 0,
     "description": "Its ScheduledJob (or API job)."},
    {"name": "Attempt", "type": "integer", "format": "", "priority": 0,
     "description": "Which attempt it is."},
    {"name": "Status", "type": "string", "format": "", "priority": 0,
     "description": "Where it stands, or how it ended."},
    {"name": "Manual", "type": "boolean", "format": "", "priority": 1,
     "description": "Run by hand, not by the schedule."},
    {"name": "Due", "type": "date", "format": "", "priority": 0,
     "description": "Time since it was due."},
    {"name": "Started", "type": "date", "format": "", "priority": 0,
     "description": "Time since its handler started."},
    {"name": "Duration", "type": "string", "format": "", "priority": 0,
     "description": "How long its handler ran."},
)  # fmt: skip
"""The table kubectl prints: the columns the Execution CRD mirror had."""


class BadRequest(ValueError):
    """A request kubectl could send but this resource cannot answer (400, reason BadRequest)."""


class Expired(ValueError):
    """A continue token too old to resume (410, reason Expired)."""


def job_label(job_id: uuid.UUID, job_name: str | None) -> str:
    """The `horae.dev/job` label: the job's name, or its id for an unnamed API job."""
    return job_name or str(job_id)


def name_of(row: ExecutionRow, job_name: str | None) -> str:
    return f"{job_label(row.job_id, job_name)}-{row.id.hex[:ID_DIGITS]}"


@dataclass(frozen=True)
class ParsedName:
    job: str
    """The job's label: its name, or its id."""
    low: uuid.UUID
    high: uuid.UUID
    """The execution ids the name's digits can stand for."""


_NAME = re.compile(rf"^(?P<job>.+)-(?P<digits>[0-9a-f]{{{ID_DIGITS}}})$")


def parse_name(name: str) -> ParsedName | None:
    """The job and id range an execution's name stands for; None for a name no execution has."""
    match = _NAME.match(name)
    if match is None:
        return None
    digits = match["digits"]
    pad = 32 - len(digits)
    return ParsedName(
        job=match["job"],
        low=uuid.UUID(digits + "0" * pad),
        high=uuid.UUID(digits + "f" * pad),
    )


def version_of(row: ExecutionRow) -> int:
    """The row's resourceVersion: its last change, in microseconds since the epoch."""
    last = max(t for t in (row.created_at, row.enqueued_at, row.started_at, row.finished_at) if t)
    return micros(last)


def micros(at: datetime) -> int:
    delta = at - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1_000_000, tz=UTC)


def _precise(value: datetime | None) -> str | None:
    """A time to the microsecond (the store's precision), RFC 3339 in UTC."""
    if value is None:
        return None
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def duration_of(row: ExecutionRow) -> str | None:
    if row.started_at and row.finished_at:
        return f"{(row.finished_at - row.started_at).total_seconds():.3f}s"
    return None


def metadata(row: ExecutionRow, job_name: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name_of(row, job_name),
        "namespace": row.tenant,
        "uid": str(row.id),
        "resourceVersion": str(version_of(row)),
        "creationTimestamp": rfc3339(row.created_at),
        "labels": {JOB_LABEL: job_label(row.job_id, job_name)},
    }
    return meta


def execution(row: ExecutionRow, job_name: str | None) -> dict[str, Any]:
    """The Execution object of one row: everything the store holds of it that a user reads,
    the error and the result whole."""
    error = None
    if row.error_kind:
        error = f"{row.error_kind}: {row.error_message or ''}".strip()
    status: dict[str, Any] = {
        "phase": PHASES[row.status],
        "executionId": str(row.id),
        "jobId": str(row.job_id),
        "task": row.task,
        "attempt": row.attempt,
        "manual": row.manual,
        "backfill": str(row.backfill) if row.backfill else None,
        "occurrenceAt": _precise(row.occurrence_at),
        "dueAt": _precise(row.due_at),
        "startedAt": _precise(row.started_at),
        "finishedAt": _precise(row.finished_at),
        "duration": duration_of(row),
        "worker": row.lease_owner,
        "error": error,
        "result": row.result,
    }
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata(row, job_name),
        "status": {k: v for k, v in status.items() if v is not None},
    }


def human_duration(seconds: float) -> str:
    """Kubernetes's HumanDuration (k8s.io/apimachinery/pkg/util/duration), which kubectl
    shows for a `date` column: 2-3 significant figures."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        rest = whole % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        rest = (hours // 24) % 365
        return f"{hours // 24 // 365}y{rest}d" if rest else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _since(value: datetime | None, now: datetime) -> str | None:
    return None if value is None else human_duration((now - value).total_seconds())


def cells(row: ExecutionRow, job_name: str | None, now: datetime) -> list[Any]:
    return [
        name_of(row, job_name),
        job_label(row.job_id, job_name),
        row.attempt,
        PHASES[row.status],
        row.manual,
        _since(row.due_at, now),
        _since(row.started_at, now),
        duration_of(row),
    ]


def table(
    rows: Sequence[tuple[ExecutionRow, str | None]],
    *,
    now: datetime,
    include: str,
    headers: bool = True,
    list_meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table of `rows`; `include` is TableOptions' includeObject (None,
    Metadata: a PartialObjectMetadata, the default; Object: the whole Execution)."""
    out_rows = []
    for row, job_name in rows:
        entry: dict[str, Any] = {"cells": cells(row, job_name, now)}
        if include == "Object":
            entry["object"] = execution(row, job_name)
        elif include != "None":
            entry["object"] = {
                "apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadata",
                "metadata": metadata(row, job_name),
            }
        out_rows.append(entry)
    return {
        "apiVersion": "meta.k8s.io/v1",
        "kind": "Table",
        "metadata": dict(list_meta or {}),
        "columnDefinitions": list(COLUMNS) if headers else None,
        "rows": out_rows,
    }


# Selectors ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """What a list or watch asks for, from its label and field selectors."""

    name: str | None = None
    """metadata.name=: one execution."""
    jobs: frozenset[str] | None = None
    """horae.dev/job = / in: executions of these jobs only (None: any job)."""
    not_jobs: frozenset[str] = frozenset()
    """horae.dev/job != / notin: not of these."""
    statuses: frozenset[ExecutionStatus] | None = None
    """status.phase: these statuses only (None: any)."""
    nothing: bool = False
    """A selector no execution can match (another label, two names...): an empty answer."""

    def admits_job(self, label: str) -> bool:
        if label in self.not_jobs:
            return False
        return self.jobs is None or label in self.jobs


_REQUIREMENT = re.compile(
    r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9_./-]+)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<value>[A-Za-z0-9_.-]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<values>[^)]*)\))?\s*$"
)


def _split_requirements(selector: str) -> list[str]:
    """Comma-separated requirements; commas inside `( )` belong to a set."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(selector):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(selector[start:i])
            start = i + 1
    parts.append(selector[start:])
    return [p for p in parts if p.strip()]


def parse_label_selector(selector: str, into: Selection) -> Selection:
    """`horae.dev/job=NAME`, `!=`, `in (a,b)`, `notin (a)`, `horae.dev/job` (exists) and
    `!horae.dev/job`; a requirement on any other label key matches no execution when it
    asks for the label (`key=v`, `key`, `key in (...)`) and every one when it asks for its
    absence (`key!=v`, `!key`, `key notin (...)`), as for any object without that label."""
    jobs, not_jobs, nothing = into.jobs, set(into.not_jobs), into.nothing
    for text in _split_requirements(selector):
        match = _REQUIREMENT.match(text)
        if match is None:
            raise BadRequest(f"unable to parse requirement: {text.strip()!r}")
        key, op, setop = match["key"], match["op"], match["setop"]
        if match["neg"] and (op or setop):
            raise BadRequest(f"unable to parse requirement: {text.strip()!r}")
        values: set[str]
        if setop:
            values = {v.strip() for v in match["values"].split(",") if v.strip()}
        else:
            values = {match["value"]} if op else set()
        positive = (op in ("=", "==") or setop == "in") or (
            not op and not setop and not match["neg"]
        )
        if key != JOB_LABEL:
            if positive:
                nothing = True
            continue
        if op in ("=", "==") or setop == "in":
            jobs = frozenset(values) if jobs is None else jobs & values
        elif op == "!=" or setop == "notin":
            not_jobs |= values
        elif match["neg"]:
            nothing = True  # every execution has its job's label
    return Selection(
        name=into.name,
        jobs=jobs,
        not_jobs=frozenset(not_jobs),
        statuses=into.statuses,
        nothing=nothing,
    )


FIELDS = ("metadata.name", "metadata.namespace", "status.phase")


def parse_field_selector(selector: str, namespace: str | None, into: Selection) -> Selection:
    """`metadata.name`, `metadata.namespace` and `status.phase` with `=`, `==` or `!=`;
    another field is refused as the API server refuses it ("field label not supported")."""
    name, statuses, nothing = into.name, into.statuses, into.nothing
    for text in _split_requirements(selector):
        match = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", text)
        if match is None:
            raise BadRequest(f"invalid field selector: {text.strip()!r}")
        key, op, value = match.groups()
        if key not in FIELDS:
            raise BadRequest(f"field label not supported: {key}")
        equal = op != "!="
        if key == "metadata.name":
            if equal:
                nothing |= name is not None and name != value
                name = value
            elif name == value:
                nothing = True
        elif key == "metadata.namespace":
            if namespace is not None and (value == namespace) != equal:
                nothing = True  # another namespace than the request's
        else:
            status = _BY_PHASE.get(value)
            if status is None and equal:
                nothing = True
                continue
            chosen = {status} if equal and status else set(PHASES) - ({status} if status else set())
            statuses = frozenset(chosen) if statuses is None else statuses & chosen
    return Selection(
        name=name,
        jobs=into.jobs,
        not_jobs=into.not_jobs,
        statuses=statuses,
        nothing=nothing,
    )


def select(
    label_selector: str | None, field_selector: str | None, namespace: str | None
) -> Selection:
    selection = Selection()
    if label_selector:
        selection = parse_label_selector(label_selector, selection)
    if field_selector:
        selection = parse_field_selector(field_selector, namespace, selection)
    return selection


# Continue tokens ---------------------------------------------------------------------


@dataclass(frozen=True)
class ContinueToken:
    """Where a paged list stopped: after (namespace, due_at, id), in a list begun at
    `started`."""

    namespace: str
    due_at: datetime
    id: uuid.UUID
    started: int
    """The list's resourceVersion (microseconds since the epoch)."""


def encode_continue(position: ContinueToken) -> str:
    raw = json.dumps(
        {
            "n": position.namespace,
            "d": micros(position.due_at),
            "i": position.id.hex,
            "rv": position.started,
        },
        separators=(",", ":"),
    ).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_continue(token: str, *, now: int, ttl_micros: int) -> ContinueToken:
    """The position a token holds; BadRequest for one this server did not write, Expired
    for one whose list began more than the ttl ago."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        position = ContinueToken(
            namespace=str(data["n"]),
            due_at=from_micros(int(data["d"])),
            id=uuid.UUID(hex=data["i"]),
            started=int(data["rv"]),
        )
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise BadRequest("continue: not a continue token this server wrote") from None
    if now - position.started > ttl_micros:
        raise Expired(
            "The provided continue parameter is too old to display a consistent list result."
            " You can start a new list without the continue parameter."
        )
    return position

"""What the job routes share: the error responses they document, and the checks of a new
or edited job's spec that a field bound cannot express (the domain core's rules)."""

import hashlib
from datetime import datetime
from typing import Any

from horae.api.problems import PROBLEM, invalid
from horae.api.schemas import JobCreate
from horae.domain.limits import lateness_error, payload_size_error
from horae.models import JobSpec

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"description": text, "content": {PROBLEM: {}}}
    for code, text in {
        401: "Missing or invalid bearer token",
        403: "The caller may not do this in this tenant",
        404: "No such job or execution in this tenant",
        409: "Conflicts with the job's state or an Idempotency-Key",
        413: "Payload or batch too large",
        422: "Invalid request; `errors` names each field",
        429: "The tenant is at one of its quotas (max_jobs, max_fires_per_minute); `errors` "
        "names it",
    }.items()
}


def check_payload(spec: JobSpec, field: str = "payload") -> None:
    error = payload_size_error(spec.payload)
    if error is not None:
        raise invalid(field, error, 413)


def check_run_at(spec: JobSpec, now: datetime, field: str = "run_at") -> None:
    error = lateness_error(
        spec.run_at, starting_deadline_seconds=spec.starting_deadline_seconds, now=now
    )
    if error is not None:
        raise invalid(field, f"run_at {error}")


def validate_new(job: JobCreate, now: datetime, prefix: str = "") -> JobSpec:
    spec = job.spec()
    check_payload(spec, f"{prefix}payload")
    check_run_at(spec, now, f"{prefix}run_at")
    return spec


def request_hash(job: JobCreate) -> str:
    return hashlib.sha256(job.model_dump_json().encode()).hexdigest()

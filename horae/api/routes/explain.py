"""/jobs/{id}/explain: why an occurrence of a job ran as it did, or did not run."""

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from horae.api.deps import MayGet, StoreDep
from horae.api.problems import invalid
from horae.api.routes.common import ERRORS
from horae.api.schemas import ExplanationOut
from horae.clock import utc_now
from horae.domain.instants import parse_rfc3339
from horae.store.explain import explain_occurrence

router = APIRouter()


@router.get("/jobs/{job_id}/explain", response_model=ExplanationOut, responses=ERRORS)
async def explain(
    job_id: uuid.UUID,
    tenant: MayGet,
    store: StoreDep,
    at: Annotated[
        str | None,
        Query(
            max_length=64,
            description="The occurrence to explain, as an RFC 3339 instant with a UTC offset "
            "(default: the job's most recent occurrence at or before now).",
        ),
    ] = None,
) -> ExplanationOut:
    """Why the job's occurrence at `at` ran as it did, or has no execution: its due time, the
    shard and the replica that owned it, its dispatch, claim, attempts and outcome, a skip's
    reason, or the reason there is no row (not a fire time, before the job existed, paused,
    cancelled, past retention, not due yet), with a one-line verdict."""
    when = None
    if at is not None:
        try:
            when = parse_rfc3339(at)
        except ValueError as exc:
            raise invalid("at", str(exc)) from None
    found = await explain_occurrence(store, job_id, tenant=tenant, at=when, now=utc_now())
    return ExplanationOut.from_explanation(found)

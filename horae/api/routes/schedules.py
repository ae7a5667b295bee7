"""/schedules:preview: a schedule's fire times, without creating anything."""

import pydantic
from fastapi import APIRouter

from horae.api.problems import invalid
from horae.api.routes.common import ERRORS
from horae.api.schemas import PreviewOut, PreviewRequest
from horae.clock import utc_now
from horae.domain.fields import first_error
from horae.models import JobSpec
from horae.schedule import next_fire_times, validate_cron

router = APIRouter()


@router.post("/schedules:preview", response_model=PreviewOut, responses=ERRORS)
async def preview(body: PreviewRequest) -> PreviewOut:
    """Fire times of a schedule, without creating anything."""
    if (body.cron is None) == (body.run_at is None):
        raise invalid("cron", "exactly one of cron and run_at is required")
    try:
        spec = JobSpec(task="preview", cron=body.cron, run_at=body.run_at, time_zone=body.time_zone)
    except pydantic.ValidationError as exc:
        error = first_error(exc)
        raise invalid(error.path(default="cron"), error.message) from None
    if spec.cron is not None:
        validate_cron(spec.cron)
    after = body.after or utc_now()  # bounded by PreviewRequest
    times = next_fire_times(
        run_at=spec.run_at, cron=spec.cron, time_zone=spec.time_zone, after=after, count=body.count
    )
    return PreviewOut(fire_times=times)

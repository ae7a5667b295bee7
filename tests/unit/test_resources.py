from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pydantic
import pytest

from horae.resources import ScheduledJobSpec, render

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("folder", ["crds", "charts/horae/crds"])
def test_checked_in_crds_match_the_generator(folder: str) -> None:
    on_disk = {p.name: p.read_text() for p in (REPO / folder).glob("*.yaml")}
    assert on_disk == render(), f"{folder}/ is stale: run `make crds`"


def test_scheduledjob_spec_maps_to_a_job_spec() -> None:
    spec = ScheduledJobSpec.model_validate({
        "task": "send-invoice", "schedule": "0 9 * * 1", "timeZone": "Europe/London",
        "retryPolicy": {"maxAttempts": 3}, "payload": {"customer": 7}, "suspend": True,
    })  # fmt: skip
    job = spec.job_spec()
    assert job.cron == "0 9 * * 1" and job.time_zone == "Europe/London"
    assert job.retry.max_attempts == 3 and job.payload == {"customer": 7}
    assert spec.suspend is True


def test_scheduledjob_run_at_is_kept() -> None:
    spec = ScheduledJobSpec.model_validate({"task": "t", "runAt": "2030-01-01T00:00:00Z"})
    assert spec.job_spec().run_at == datetime(2030, 1, 1, tzinfo=UTC)


def test_scheduledjob_spec_errors_name_the_field() -> None:
    spec = ScheduledJobSpec.model_validate(
        {"task": "t", "schedule": "0 9 * * *", "timeZone": "Nowhere/Land"}
    )
    with pytest.raises(pydantic.ValidationError, match="time_zone"):
        spec.job_spec()

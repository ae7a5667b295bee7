from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pydantic
import pytest

from horae.resources import History, ScheduledJobSpec, crds, render

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


def test_scheduledjob_catch_up_maps_its_window_to_seconds_and_defaults_to_latest() -> None:
    spec = ScheduledJobSpec.model_validate(
        {"task": "t", "schedule": "* * * * *", "catchUp": {"policy": "All", "window": "1h30m"}}
    )
    job = spec.job_spec()
    assert (job.catch_up, job.catch_up_window_seconds) == ("All", 5400)
    default = ScheduledJobSpec.model_validate({"task": "t", "schedule": "* * * * *"}).job_spec()
    assert (default.catch_up, default.catch_up_window_seconds) == ("Latest", None)


@pytest.mark.parametrize("window", ["0s", "745h", "1d", "soon"])
def test_a_catch_up_window_stored_before_the_crd_checked_it_is_refused_naming_it(
    window: str,
) -> None:
    reason = r"catchUp\.window\n  Value error, '.*' is (out of range|not a duration)"
    with pytest.raises(pydantic.ValidationError, match=reason):
        ScheduledJobSpec.model_validate(
            {"task": "t", "schedule": "* * * * *", "catchUp": {"window": window}}
        )


def test_scheduledjob_run_at_is_kept() -> None:
    spec = ScheduledJobSpec.model_validate({"task": "t", "runAt": "2030-01-01T00:00:00Z"})
    assert spec.job_spec().run_at == datetime(2030, 1, 1, tzinfo=UTC)


def test_scheduledjob_spec_errors_name_the_field() -> None:
    spec = ScheduledJobSpec.model_validate(
        {"task": "t", "schedule": "0 9 * * *", "timeZone": "Nowhere/Land"}
    )
    with pytest.raises(pydantic.ValidationError, match="time_zone"):
        spec.job_spec()


def undescribed(schema: dict[str, Any], path: str) -> list[str]:
    """The paths (as `kubectl explain` spells them) of the properties under `schema` that
    have no description."""
    missing = []
    for name, prop in schema.get("properties", {}).items():
        where = f"{path}.{name}"
        if not str(prop.get("description", "")).strip():
            missing.append(where)
        missing += undescribed(prop, where)
    if "items" in schema:
        missing += undescribed(schema["items"], path)
    return missing


@pytest.mark.parametrize("crd", crds(), ids=lambda c: c["spec"]["names"]["kind"])
def test_every_field_of_every_crd_says_what_it_is(crd: dict[str, Any]) -> None:
    """What `kubectl explain KIND.FIELD` shows: no field without a description."""
    kind = crd["spec"]["names"]["kind"].lower()
    for version in crd["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        assert schema.get("description"), kind
        assert undescribed(schema, kind) == []
        for column in version["additionalPrinterColumns"]:
            assert column.get("description"), column["name"]


def test_the_walk_finds_a_property_without_a_description() -> None:
    schema = {
        "properties": {
            "a": {"description": "x", "properties": {"b": {}}},
            "c": {"type": "array", "items": {"properties": {"d": {}}}},
        }
    }
    assert undescribed(schema, "k") == ["k.a.b", "k.c", "k.c.d"]


def test_no_date_column_shows_an_instant_to_come() -> None:
    """kubectl shows a `date` column as the time since the instant: a future one reads 0s."""
    columns = {
        (crd["spec"]["names"]["kind"], c["name"]): c
        for crd in crds()
        for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]
    }
    assert columns["ScheduledJob", "Next Run"]["type"] == "string"
    assert columns["ScheduledJob", "Last Schedule"]["type"] == "date"


def test_a_workerpool_scales_through_its_scale_subresource() -> None:
    [pool] = [c for c in crds() if c["spec"]["names"]["kind"] == "WorkerPool"]
    version = pool["spec"]["versions"][0]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert status["selector"]["type"] == "string"


@pytest.mark.parametrize(
    ("limits", "history"),
    [
        ({}, History(newest=10)),
        ({"historyLimit": 0}, History(newest=0)),
        ({"successfulJobsHistoryLimit": 5}, History(newest=None, succeeded=5, failed=1)),
        ({"failedJobsHistoryLimit": 0}, History(newest=None, succeeded=3, failed=0)),
        ({"successfulJobsHistoryLimit": 2, "failedJobsHistoryLimit": 4},
         History(newest=None, succeeded=2, failed=4)),
    ],
)  # fmt: skip
def test_history_limits_map_a_cronjobs_pair_or_horaes_one(
    limits: dict[str, int], history: History
) -> None:
    spec = ScheduledJobSpec.model_validate({"task": "t", "schedule": "* * * * *", **limits})
    assert spec.history() == history


def test_history_limit_and_the_cronjob_pair_exclude_each_other() -> None:
    with pytest.raises(pydantic.ValidationError, match="historyLimit cannot be combined"):
        ScheduledJobSpec.model_validate(
            {"task": "t", "schedule": "* * * * *", "historyLimit": 3, "failedJobsHistoryLimit": 1}
        )

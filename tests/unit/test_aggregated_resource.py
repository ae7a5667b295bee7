"""The Execution resource of runs.horae.dev as kubectl meets it: names, objects, table
cells, selectors and continue tokens (horae/aggregated/resource.py)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from horae.aggregated.resource import (
    COLUMNS,
    BadRequest,
    ContinueToken,
    Expired,
    decode_continue,
    encode_continue,
    execution,
    human_duration,
    name_of,
    parse_name,
    select,
    table,
)
from horae.models import ExecutionStatus
from horae.store.rows import ExecutionRow

DUE = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)


def row(**changes: object) -> ExecutionRow:
    values: dict[str, object] = dict(
        id=uuid.UUID("0123456789abcdef0123456789abcdef"), job_id=uuid.uuid4(), tenant="shop",
        task="reports.build", shard=3, due_at=DUE, occurrence_at=DUE, attempt=2, job_version=1,
        status=ExecutionStatus.FAILED, cancel_requested=False, starting_deadline_seconds=None,
        concurrency_policy="Allow", lease_owner="worker-1", lease_until=None,
        enqueued_at=DUE, dispatch_epoch=1, started_at=DUE + timedelta(seconds=1),
        finished_at=DUE + timedelta(seconds=3.5), error_kind="ValueError",
        error_message="x" * 5000, result=None, created_at=DUE - timedelta(seconds=1),
        manual=True,
    )  # fmt: skip
    values.update(changes)
    return ExecutionRow(**values)  # type: ignore[arg-type]


# Kubernetes's own HumanDuration cases (k8s.io/apimachinery/pkg/util/duration).
@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-2, "<invalid>"), (-1, "0s"), (0, "0s"), (119, "119s"), (120, "2m"), (121, "2m1s"),
        (600, "10m"), (10799, "179m"), (10800, "3h"), (10860, "3h1m"), (8 * 3600, "8h"),
        (47 * 3600, "47h"), (48 * 3600, "2d"), (49 * 3600, "2d1h"), (8 * 86400, "8d"),
        (729 * 86400, "729d"), (730 * 86400, "2y"), (731 * 86400, "2y1d"),
        (8 * 365 * 86400, "8y"),
    ],
)  # fmt: skip
def test_ages_read_as_kubectl_prints_them(seconds: float, shown: str) -> None:
    assert human_duration(seconds) == shown


def test_a_name_holds_its_job_and_the_first_16_digits_of_its_id() -> None:
    r = row()
    assert name_of(r, "nightly-report") == "nightly-report-0123456789abcdef"
    assert name_of(r, None) == f"{r.job_id}-0123456789abcdef"  # an unnamed API job
    parsed = parse_name("nightly-report-0123456789abcdef")
    assert parsed is not None and parsed.job == "nightly-report"
    assert parsed.low <= r.id <= parsed.high
    assert parsed.low == uuid.UUID("0123456789abcdef0000000000000000")
    for other in ("nightly-report", "nightly-report-0123", "x-0123456789ABCDEF", "-"):
        assert parse_name(other) is None


def test_the_object_shows_the_whole_error_and_its_result_and_what_the_crd_showed() -> None:
    shown = execution(row(), "nightly-report")
    assert shown["apiVersion"] == "runs.horae.dev/v1alpha1" and shown["kind"] == "Execution"
    assert shown["metadata"]["name"] == "nightly-report-0123456789abcdef"
    assert shown["metadata"]["labels"] == {"horae.dev/job": "nightly-report"}
    assert shown["metadata"]["uid"] == "01234567-89ab-cdef-0123-456789abcdef"
    status = shown["status"]
    assert status["phase"] == "Failed" and status["attempt"] == 2 and status["manual"] is True
    assert status["error"] == "ValueError: " + "x" * 5000  # the store's whole message
    assert status["duration"] == "2.500s"
    assert status["dueAt"] == "2030-01-01T09:00:00.000000Z"
    assert "result" not in status  # none: left out, as kubectl shows absent fields
    ok = execution(row(status=ExecutionStatus.SUCCEEDED, result={"rows": 3}), "n")["status"]
    assert ok["result"] == {"rows": 3} and ok["phase"] == "Succeeded"
    assert execution(row(status=ExecutionStatus.TIMED_OUT), "n")["status"]["phase"] == "TimedOut"


def test_a_table_row_has_a_cell_per_column_and_the_metadata_kubectl_reads() -> None:
    now = DUE + timedelta(minutes=3)
    running = row(status=ExecutionStatus.RUNNING, finished_at=None, error_kind=None)
    shown = table([(row(), "report"), (running, "report")], now=now, include="Metadata")
    assert [c["name"] for c in shown["columnDefinitions"]] == [c["name"] for c in COLUMNS]
    first, second = shown["rows"]
    assert first["cells"] == ["report-0123456789abcdef", "report", 2, "Failed", True, "3m",
                              "2m59s", "2.500s"]  # fmt: skip
    assert second["cells"][3] == "Running" and second["cells"][7] is None
    assert first["object"]["kind"] == "PartialObjectMetadata"
    assert first["object"]["metadata"]["namespace"] == "shop"
    assert "object" not in table([(row(), "r")], now=now, include="None")["rows"][0]
    whole = table([(row(), "r")], now=now, include="Object")["rows"][0]["object"]
    assert whole["kind"] == "Execution"


def test_selectors_kubectl_sends() -> None:
    chosen = select("horae.dev/job=report", "status.phase=Failed", "shop")
    assert chosen.jobs == {"report"} and chosen.statuses == {ExecutionStatus.FAILED}
    assert not chosen.nothing
    either = select("horae.dev/job in (a, b)", None, "shop")
    assert either.jobs == {"a", "b"}
    assert select("horae.dev/job in (a,b),horae.dev/job=b", None, "shop").jobs == {"b"}
    assert select("horae.dev/job!=a", None, "shop").not_jobs == {"a"}
    assert select("horae.dev/job notin (a,c)", None, "shop").not_jobs == {"a", "c"}
    not_failed = select(None, "status.phase!=Failed", "shop").statuses
    assert not_failed is not None and ExecutionStatus.FAILED not in not_failed
    assert ExecutionStatus.SUCCEEDED in not_failed
    assert ExecutionStatus.SCHEDULED not in not_failed  # never shown
    assert select(None, "metadata.name=report-0123456789abcdef", "shop").name == (
        "report-0123456789abcdef"
    )
    # What no execution has: another label, a phase no status has, another namespace.
    assert select("team=a", None, "shop").nothing
    assert select("!horae.dev/job", None, "shop").nothing
    assert not select("team!=a", None, "shop").nothing
    assert select(None, "status.phase=Exploded", "shop").nothing
    assert select(None, "metadata.namespace=other", "shop").nothing
    assert not select(None, "metadata.namespace=shop", "shop").nothing


@pytest.mark.parametrize(
    ("labels", "fields", "message"),
    [
        (None, "spec.task=x", "field label not supported: spec.task"),
        (None, "status.phase", "invalid field selector"),
        ("horae.dev/job=(a", None, "unable to parse requirement"),
        ("!horae.dev/job=a", None, "unable to parse requirement"),
    ],
)
def test_a_selector_this_resource_cannot_answer_is_a_bad_request(
    labels: str | None, fields: str | None, message: str
) -> None:
    with pytest.raises(BadRequest, match=message.replace("(", r"\(")):
        select(labels, fields, "shop")


def test_a_continue_token_resumes_where_its_page_stopped_until_it_expires() -> None:
    token = ContinueToken(namespace="shop", due_at=DUE, id=row().id, started=1_000_000)
    text = encode_continue(token)
    assert decode_continue(text, now=1_000_000 + 5, ttl_micros=10) == token
    with pytest.raises(Expired, match="too old"):
        decode_continue(text, now=1_000_000 + 11, ttl_micros=10)
    for bad in ("", "not-a-token", "eyJ4IjoxfQ"):  # the last: {"x":1}
        with pytest.raises(BadRequest, match="continue"):
            decode_continue(bad, now=0, ttl_micros=10)

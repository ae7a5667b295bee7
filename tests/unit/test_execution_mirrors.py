"""What an Execution resource shows of an execution's error: bounded, and marked when cut."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from horae.models import ExecutionStatus
from horae.operator.executions import mirror_status
from horae.resources import MIRRORED_ERROR_CHARS, execution_schema
from horae.store.rows import ExecutionRow


def _row(kind: str | None, message: str | None) -> ExecutionRow:
    at = datetime(2030, 1, 1, tzinfo=UTC)
    return ExecutionRow(
        id=uuid.uuid4(),
        job_id=uuid.uuid4(),
        tenant="t",
        task="t",
        shard=0,
        due_at=at,
        occurrence_at=at,
        attempt=1,
        job_version=1,
        status=ExecutionStatus.FAILED,
        cancel_requested=False,
        starting_deadline_seconds=None,
        concurrency_policy="Allow",
        lease_owner=None,
        lease_until=None,
        enqueued_at=at,
        dispatch_epoch=1,
        started_at=at,
        finished_at=at,
        error_kind=kind,
        error_message=message,
        result=None,
        created_at=at,
        manual=False,
    )


def test_a_handlers_long_error_is_cut_to_the_documented_bound_and_marked() -> None:
    error = mirror_status(_row("ValueError", "é" * 5000))["error"]
    assert len(error) == MIRRORED_ERROR_CHARS and error.endswith("…")
    assert error.startswith("ValueError: ééé")
    short = mirror_status(_row("KeyError", "'x'"))["error"]
    assert short == "KeyError: 'x'"


def test_the_crd_refuses_an_error_longer_than_the_bound() -> None:
    error = execution_schema()["properties"]["status"]["properties"]["error"]
    assert error["maxLength"] == MIRRORED_ERROR_CHARS

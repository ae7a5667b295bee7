"""What an Execution resource shows of an execution's error: bounded, and marked when cut."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from horae.models import ExecutionStatus
from horae.operator.executions import mirror_status
from horae.resources import MIRRORED_ERROR_CHARS, MIRRORED_RESULT_CHARS, execution_schema
from horae.store.rows import ExecutionRow


def _row(kind: str | None, message: str | None, result: Any = None) -> ExecutionRow:
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
        result=result,
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


def test_a_large_result_is_cut_to_the_documented_bound_and_says_so() -> None:
    status = mirror_status(_row(None, None, {"rows": list(range(1000))}))
    assert len(status["result"]) == MIRRORED_RESULT_CHARS and status["result"].endswith("…")
    assert status["result"].startswith('{"rows":[0,1,2,') and status["resultTruncated"] is True
    small = mirror_status(_row(None, None, {"sent": 3}))
    assert (small["result"], small["resultTruncated"]) == ('{"sent":3}', False)
    assert mirror_status(_row(None, None))["result"] is None
    result = execution_schema()["properties"]["status"]["properties"]["result"]
    assert result["maxLength"] == MIRRORED_RESULT_CHARS

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from horae.errors import PermanentError, RetryableError
from horae.models import ExecutionStatus, RetryPolicy
from horae.worker.outcome import classify

NOW = datetime(2026, 1, 1, tzinfo=UTC)
POLICY = RetryPolicy(max_attempts=3, initial_interval_seconds=1, max_interval_seconds=10)


def policy() -> RetryPolicy:
    return POLICY


def unreadable() -> RetryPolicy:
    raise AssertionError("the policy was read")


def top(lo: float, hi: float) -> float:
    return hi


class HttpError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


def test_success() -> None:
    assert classify(None, attempt=1, policy=policy, now=NOW).status == ExecutionStatus.SUCCEEDED


def test_retryable_error_retries_after_backoff() -> None:
    outcome = classify(RetryableError("busy"), attempt=2, policy=policy, now=NOW, rand=top)
    assert outcome.status == ExecutionStatus.FAILED
    assert outcome.retry_at == NOW + timedelta(seconds=2)
    assert outcome.error_kind == "RetryableError"


def test_retryable_error_delay_overrides_backoff() -> None:
    exc = RetryableError("later", delay=timedelta(seconds=42))
    assert classify(exc, attempt=1, policy=policy, now=NOW).retry_at == NOW + timedelta(seconds=42)


def test_timeout_is_timed_out_and_retryable() -> None:
    outcome = classify(TimeoutError(), attempt=1, policy=policy, now=NOW, rand=top)
    assert outcome.status == ExecutionStatus.TIMED_OUT
    assert outcome.error_kind == "timeout"
    assert outcome.retry_at == NOW + timedelta(seconds=1)


def test_permanent_error_fails_at_once() -> None:
    outcome = classify(PermanentError("bad payload"), attempt=1, policy=policy, now=NOW)
    assert outcome.status == ExecutionStatus.FAILED and outcome.retry_at is None
    assert outcome.error_message == "bad payload"


def test_unclassified_exceptions_are_permanent() -> None:
    outcome = classify(ValueError("nope"), attempt=1, policy=policy, now=NOW)
    assert outcome.status == ExecutionStatus.FAILED and outcome.retry_at is None


def test_http_429_and_5xx_retry_but_4xx_does_not() -> None:
    for status in (429, 500, 503):
        assert classify(HttpError(status), attempt=1, policy=policy, now=NOW).retry_at is not None
    assert classify(HttpError(404), attempt=1, policy=policy, now=NOW).retry_at is None


def test_last_attempt_is_dead() -> None:
    outcome = classify(ConnectionError("down"), attempt=3, policy=policy, now=NOW)
    assert outcome.status == ExecutionStatus.DEAD and outcome.retry_at is None


def test_the_policy_is_read_only_for_a_failure_that_may_be_retried() -> None:
    assert classify(None, attempt=1, policy=unreadable, now=NOW).status == "succeeded"
    assert classify(ValueError("no"), attempt=1, policy=unreadable, now=NOW).status == "failed"

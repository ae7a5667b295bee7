"""The one call helper every Kubernetes adapter goes through."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from horae.kube.calling import REQUEST_TIMEOUT, call


class _Recorder:
    def __init__(self, status: int | None = None) -> None:
        self.status = status
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any], str]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        self.calls.append((args, kwargs, threading.current_thread().name))
        if self.status is not None:
            raise ApiException(status=self.status)
        return "answer"


async def test_a_call_runs_off_the_event_loop_with_the_request_timeout() -> None:
    method = _Recorder()
    assert await call(method, "a", "b", label_selector="x") == "answer"
    [(args, kwargs, thread)] = method.calls
    assert args == ("a", "b")
    assert kwargs == {"label_selector": "x", "_request_timeout": REQUEST_TIMEOUT}
    # kubernetes.client.rest applies an int (or a pair) and silently ignores a float.
    assert type(kwargs["_request_timeout"]) is int
    assert thread != threading.current_thread().name


async def test_a_call_takes_its_own_timeout() -> None:
    method = _Recorder()
    await call(method, timeout=60)
    assert method.calls[0][1] == {"_request_timeout": 60}


async def test_not_found_is_none_only_where_the_caller_allows_it() -> None:
    assert await call(_Recorder(404), missing_ok=True) is None
    with pytest.raises(ApiException) as raised:
        await call(_Recorder(404))
    assert raised.value.status == 404


async def test_other_api_errors_pass_through_once_without_retries() -> None:
    method = _Recorder(409)
    with pytest.raises(ApiException):
        await call(method, missing_ok=True)
    assert len(method.calls) == 1

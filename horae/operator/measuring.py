"""The operator's own metrics (`horae.metrics`): each run of a resource's handlers, by its
result and duration, and the failures of the background parts, which log and go on."""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

import kopf

from horae import metrics

KINDS = ("ScheduledJob", "WorkerPool")
PARTS = ("status-mirror", "execution-mirrors", "autoscaler", "resync")

P = ParamSpec("P")
R = TypeVar("R")


def start() -> None:
    """Every series at 0 from the start (`metrics.zero`)."""
    for kind in KINDS:
        for result in ("ok", "refused", "error"):
            metrics.reconciles.labels(kind, result)
    metrics.zero(metrics.operator_errors, *PARTS)
    metrics.zero(metrics.scale_decisions, "up", "down")


@contextmanager
def reconciling(kind: str) -> Iterator[None]:
    """Around one run of a `kind` resource's handler: counted `ok`, `refused` (a kopf
    Permanent or TemporaryError the handler raises on purpose: the resource cannot be
    acted on as it stands, as its status says) or `error` (anything else); timed. A run
    cancelled (the operator stopping) is not counted."""
    started = time.perf_counter()
    try:
        yield
    except (kopf.PermanentError, kopf.TemporaryError):
        _ran(kind, "refused", started)
        raise
    except Exception:
        _ran(kind, "error", started)
        raise
    _ran(kind, "ok", started)


def measured(kind: str) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """A kopf handler of `kind` resources, measured by `reconciling` (kopf still knows the
    handler by its own name: it follows `__wrapped__`)."""

    def decorate(handler: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(handler)
        async def run(*args: P.args, **kwargs: P.kwargs) -> R:
            with reconciling(kind):
                return await handler(*args, **kwargs)

        return run

    return decorate


def _ran(kind: str, result: str, started: float) -> None:
    metrics.reconciles.labels(kind, result).inc()
    metrics.reconcile_duration.labels(kind).observe(time.perf_counter() - started)


def failed(part: str) -> None:
    """One of the background `PARTS` failed (and logged why)."""
    metrics.operator_errors.labels(part).inc()

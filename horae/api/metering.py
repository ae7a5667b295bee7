"""The API's request metrics, and its /metrics and /healthz over all its server processes.

Every request is counted by route template (`/jobs/{job_id}`, never the path itself, so
the series stay few), method and status, and timed (`horae.metrics.api_requests`,
`api_latency`), refusals by the gate included.

`horae api --workers N` runs N processes behind one port, and a scrape or a probe reaches
whichever accepts it. With more than one, `horae api` gives them a directory
(PROMETHEUS_MULTIPROC_DIR, under the temporary directory) before they start:

- prometheus_client's multiprocess mode writes each process's metrics to files there, and
  /metrics answers their sum, whichever process serves it (`horae_store_connections`
  included, the processes' pools added up; no `process_*` metrics in this mode);
- each process's event loop beats a file of its own there every second, and /healthz
  fails (503) once any live process's loop has not turned for HORAE_LIVENESS_STALL_SECONDS:
  a hung process would otherwise go unnoticed, as the others keep answering the probe. A
  process found dead (killed: uvicorn starts another) has its heartbeat and its gauges
  dropped then; its counters stay in the sums, which so never go back.

With one process, /healthz is answered on the event loop itself, so a hung loop leaves
the probe unanswered (a failure too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    generate_latest,
    multiprocess,
)
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from horae import metrics

SHARED_DIR = "PROMETHEUS_MULTIPROC_DIR"
"""The environment variable prometheus_client reads, at import, for multiprocess mode."""

BEAT_SECONDS = 1.0
UNMATCHED = "unmatched"
"""The route label of a request no route serves (a 404)."""

log = logging.getLogger(__name__)


def share_between_processes(workers: int) -> Path | None:
    """Called by `horae api` before it starts `workers` server processes: with more than
    one, a fresh directory they share, named in the environment they inherit (unless one
    is named already). Returns the directory made, for the caller to remove at exit."""
    if workers <= 1 or os.environ.get(SHARED_DIR):
        return None
    made = Path(tempfile.mkdtemp(prefix="horae-api-metrics-"))
    os.environ[SHARED_DIR] = str(made)
    return made


def shared_dir() -> Path | None:
    raw = os.environ.get(SHARED_DIR)
    return Path(raw) if raw else None


def metrics_endpoint() -> Callable[[Request], Awaitable[Response]]:
    """GET /metrics: this process's registry, or every process's sum in multiprocess mode."""
    registry = REGISTRY
    if shared_dir() is not None:
        registry = CollectorRegistry()
        # (prometheus_client's multiprocess module is unannotated)
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # see above

    async def serve(_: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return serve


class Templates:
    """The path templates the application serves, to name a request the gate refused before
    routing (routing names the others: `scope["route"]`). Read once, on first use, from the
    OpenAPI paths and the routes outside the schema; the most literal template wins
    (`/executions/{execution_id}:rerun` over `/executions/{execution_id}`)."""

    def __init__(self) -> None:
        self._compiled: list[tuple[re.Pattern[str], str]] | None = None

    def name(self, scope: Scope) -> str:
        routed = getattr(scope.get("route"), "path", None)
        if routed:
            return str(routed)
        if self._compiled is None:
            app = scope["app"]
            paths = set(app.openapi().get("paths", {}))
            paths |= {r.path for r in app.routes if isinstance(getattr(r, "path", None), str)}
            literal = sorted(paths, key=lambda t: -len(re.sub(r"\{[^}]*\}", "", t)))
            self._compiled = [(compile_path(t)[0], t) for t in literal if t]
        path = scope["path"]
        return next((t for regex, t in self._compiled if regex.match(path)), UNMATCHED)


class RequestMetrics:
    """ASGI middleware: counts, times and logs every HTTP request (outermost, so the gate's
    refusals count too). The log has one line per request: method, path, status and
    duration, never headers (tokens), query strings or bodies (payloads); successes at
    DEBUG, refusals and errors at INFO."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._templates = Templates()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            route, method = self._templates.name(scope), scope["method"]
            seconds = time.perf_counter() - started
            metrics.api_requests.labels(route, method, str(status)).inc()
            metrics.api_latency.labels(route, method).observe(seconds)
            level = logging.DEBUG if status < 400 else logging.INFO
            if log.isEnabledFor(level):
                log.log(level, "%s %s %d %.1fms", method, scope["path"], status, seconds * 1000)


PoolUse = Callable[[], Iterable[tuple[str, int, int, int]]]


class Heartbeats:
    """This process's beat, and the verdict on every process's (see the module's doc)."""

    def __init__(self, *, stall_after: float, beat_every: float = BEAT_SECONDS) -> None:
        self._dir = shared_dir()
        self._stall_after = stall_after
        self._beat_every = beat_every

    async def beat(self, pools: PoolUse) -> None:
        """Run on the event loop for the process's life (the lifespan's)."""
        if self._dir is None:
            return
        mine = self._dir / f"beat-{os.getpid()}"
        try:
            while True:
                mine.touch()
                for group, size, idle, most in pools():
                    summed = metrics.summed_store_connections
                    summed.labels(group, "in_use").set(size - idle)
                    summed.labels(group, "idle").set(idle)
                    summed.labels(group, "max").set(most)
                await asyncio.sleep(self._beat_every)
        finally:
            mine.unlink(missing_ok=True)
            # Its live gauges go (prometheus_client's multiprocess module is unannotated).
            multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]  # see above

    def liveness(self) -> tuple[bool, str]:
        """Whether every live server process's event loop turns (answered on one of them)."""
        if self._dir is None:
            return True, "event loop turning"
        now = time.time()
        for path in self._dir.glob("beat-*"):
            pid = int(path.name.removeprefix("beat-"))
            if not _alive(pid):  # killed: the server starts another; its gauges go
                path.unlink(missing_ok=True)
                multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]  # see above
                continue
            with contextlib.suppress(FileNotFoundError):
                quiet = now - path.stat().st_mtime
                if quiet > self._stall_after:
                    return False, f"process {pid}'s event loop has not turned for {quiet:.0f}s"
        return True, "every process's event loop turning"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

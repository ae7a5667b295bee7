"""Each long-running process's probe endpoints, on its metrics port:

    /metrics   Prometheus metrics
    /healthz   200 while the event loop turns (it beats every second); 503 once it has
               not for `stall_after` seconds, so a liveness probe restarts a hung loop
               (a thread that only served /metrics stayed up when the loop hung)
    /readyz    200 once the process does its job (scheduler: has taken part in a round of
               shard Leases; worker: consuming; operator: leading or standing by), 503
               with what it is waiting for before that and once it stops

The server runs in a thread, so a probe answers even while the loop is busy: /healthz
says whether the loop is alive. Tests wait on /readyz instead of reading logs.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

BEAT_SECONDS = 1.0
STALL_SECONDS = 30.0
"""A loop that has not beaten for this long is reported hung."""


class Probes:
    """Readiness set by the component, liveness from the event loop's heartbeat."""

    def __init__(
        self, *, stall_after: float = STALL_SECONDS, beat_every: float = BEAT_SECONDS
    ) -> None:
        self._lock = threading.Lock()
        self._ready = False
        self._detail = "starting"
        self._beat = time.monotonic()
        self._stall_after = stall_after
        self._beat_every = beat_every

    def ready(self, detail: str) -> None:
        """The process does its job; `detail` says how (shown by /readyz)."""
        with self._lock:
            self._ready, self._detail = True, detail

    def unready(self, detail: str) -> None:
        """The process does not (yet, or any more) do its job; `detail` says why."""
        with self._lock:
            self._ready, self._detail = False, detail

    def readiness(self) -> tuple[bool, str]:
        with self._lock:
            return self._ready, self._detail

    def liveness(self) -> tuple[bool, str]:
        quiet = time.monotonic() - self._beat
        if quiet > self._stall_after:
            return False, f"event loop has not turned for {quiet:.0f}s"
        return True, "event loop turning"

    async def beat(self) -> None:
        """Run on the event loop for as long as the process lives."""
        while True:
            self._beat = time.monotonic()
            await asyncio.sleep(self._beat_every)

    def serve(self, port: int) -> None:
        """Serve /metrics, /healthz and /readyz on `port` in a thread (0: don't)."""
        if not port:
            return
        server = ThreadingHTTPServer(("", port), _handler(self))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True, name="probes").start()


def _handler(probes: Probes) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/readyz"):
                ok, detail = probes.liveness() if path == "/healthz" else probes.readiness()
                body = json.dumps({"status": "ok" if ok else "unavailable", "detail": detail})
                self._send(200 if ok else 503, body.encode(), "application/json")
            else:
                self._send(404, b"not found\n", "text/plain")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    return Handler

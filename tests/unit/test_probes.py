"""The probe endpoints every long-running component serves on its metrics port."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request

from horae import metrics
from horae.probes import Probes
from tests.support.kube import free_port


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_readiness_follows_what_the_component_says_and_metrics_are_served() -> None:
    probes = Probes()
    port = free_port()
    probes.serve(port)
    status, body = _get(port, "/readyz")
    assert (status, json.loads(body)) == (503, {"status": "unavailable", "detail": "starting"})
    probes.ready("consuming horae.pool.default")
    assert _get(port, "/readyz") == (
        200, json.dumps({"status": "ok", "detail": "consuming horae.pool.default"})
    )  # fmt: skip
    probes.unready("stopping")
    assert _get(port, "/readyz")[0] == 503
    status, text = _get(port, "/metrics")
    assert status == 200 and metrics.dispatched._name in text
    assert _get(port, "/nothing")[0] == 404


def test_liveness_fails_while_the_event_loop_is_blocked_and_recovers_after() -> None:
    probes = Probes(stall_after=0.5, beat_every=0.05)
    port = free_port()
    probes.serve(port)

    async def turning_blocked_turning() -> list[int]:
        beat = asyncio.create_task(probes.beat())
        await asyncio.sleep(0.2)
        seen = [_get(port, "/healthz")[0]]
        time.sleep(0.8)  # noqa: ASYNC251 (the point: a handler blocking the loop)
        seen.append(_get(port, "/healthz")[0])
        await asyncio.sleep(0.2)
        seen.append(_get(port, "/healthz")[0])
        beat.cancel()
        return seen

    assert asyncio.run(turning_blocked_turning()) == [200, 503, 200]

"""Wait for observable state up to a deadline: no bare sleeps in tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx

T = TypeVar("T")


async def until(
    probe: Callable[[], Awaitable[T]], *, timeout: float, interval: float = 0.1, what: str = ""
) -> T:
    """Await `probe` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = await probe()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what or probe}: {last!r}"
            )
        await asyncio.sleep(interval)


async def until_serving(http: httpx.AsyncClient, *, timeout: float = 20) -> None:
    """Until the API behind `http` answers /healthz with 200."""

    async def up() -> bool:
        try:
            return (await http.get("/healthz")).status_code == 200
        except httpx.TransportError:
            return False

    await until(up, timeout=timeout, what=f"{http.base_url} to serve")


async def readiness(port: int) -> tuple[int, str]:
    """A component's /readyz on `port`: (HTTP status, what it says it does); (0, "") while
    nothing answers."""
    try:
        async with httpx.AsyncClient() as http:
            response = await http.get(f"http://127.0.0.1:{port}/readyz", timeout=1)
    except httpx.TransportError:
        return 0, ""
    return response.status_code, str(response.json()["detail"])


async def until_ready(port: int, *, timeout: float = 20) -> str:
    """Until the component on `port` says it is ready (horae/probes.py); what it does."""

    async def ready() -> str:
        status, detail = await readiness(port)
        return detail if status == 200 else ""

    return await until(ready, timeout=timeout, what=f"/readyz on port {port}")

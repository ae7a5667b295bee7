"""Bodies are bounded by route, and nobody's body is read before its token is checked."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import asyncpg
import httpx

from tests.integration.api.conftest import FUZZ_TOKEN, Tenants, bearer
from tests.integration.api.test_bad_input import SOON, assert_problem

DECLARED = 32 * 1024 * 1024


def _answer_while_sending(url: str, head: bytes, sent: bytes, *, deadline: float) -> bytes:
    """Send `head` and the first bytes of a body `DECLARED` bytes long, then wait (up to
    `deadline` seconds) for the server's answer without sending the rest."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=deadline) as conn:
        conn.sendall(head + f"Content-Length: {DECLARED}\r\n\r\n".encode() + sent)
        answer = b""
        ends = time.monotonic() + deadline
        while b"\r\n\r\n" not in answer and time.monotonic() < ends:
            try:
                chunk = conn.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            answer += chunk
        return answer


def test_an_anonymous_batch_is_refused_before_its_body_is_read(api_url: str) -> None:
    # 32 MiB of `{"jobs":[{},{},...]}` without a token was read and parsed whole (the
    # process grew ~750 MiB) before the 401. Now the 401 comes while 31.9 MiB of it are
    # still unsent: the server cannot have read them.
    head = (
        b"POST /jobs:batch HTTP/1.1\r\nHost: horae\r\nContent-Type: application/json\r\n"
        b"Connection: close\r\n"
    )
    answer = _answer_while_sending(api_url, head, b'{"jobs":[' + b"{}," * 30_000, deadline=10)
    assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
    assert b"application/problem+json" in answer
    # The same with a token the server does not know: refused before the body, too.
    wrong = head + b"Authorization: Bearer not-a-token\r\n"
    answer = _answer_while_sending(api_url, wrong, b'{"jobs":[' + b"{}," * 30_000, deadline=10)
    assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]


def test_an_authenticated_single_create_over_its_limit_is_refused_before_reading(
    api_url: str,
) -> None:
    # A single create may not send what a batch may: 413 from the Content-Length alone.
    head = (
        b"POST /jobs HTTP/1.1\r\nHost: horae\r\nContent-Type: application/json\r\n"
        b"Connection: close\r\nAuthorization: Bearer " + FUZZ_TOKEN.encode() + b"\r\n"
    )
    answer = _answer_while_sending(api_url, head, b'{"task": "t"', deadline=10)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]


async def test_each_route_has_its_own_body_limit(
    api: httpx.AsyncClient, tenants: Tenants, pool: asyncpg.Pool
) -> None:
    h = bearer(tenants.alice)
    blob = "x" * 2048
    # 1,000 jobs of 2 KiB (~2.2 MiB): a batch may, a single create or an edit may not.
    batch = {"jobs": [{"task": "t", "run_at": SOON, "payload": {"b": blob}}] * 1000}
    assert (await api.post("/jobs:batch", json=batch, headers=h)).status_code == 201
    big = {"task": "t", "run_at": SOON, "payload": {"b": "x" * 200_000}, "pad": " " * 1_100_000}
    await assert_problem(await api.post("/jobs", json=big, headers=h), 413, "body")
    job_id = (await api.post("/jobs", json={"task": "t", "run_at": SOON}, headers=h)).json()["id"]
    await assert_problem(await api.patch(f"/jobs/{job_id}", json=big, headers=h), 413, "body")
    over = {"jobs": [{"task": "t", "run_at": SOON, "payload": {"b": "x" * 200_000}}] * 45}
    await assert_problem(await api.post("/jobs:batch", json=over, headers=h), 413, "body")
    # The public preview takes small bodies only.
    preview = {"cron": "* * * * *", "time_zone": "UTC" + " " * 20_000}
    await assert_problem(await api.post("/schedules:preview", json=preview), 413, "body")
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 1001

"""The API's request metrics name each request by its route's template, the gate's
refusals too (they never reach routing): scraped from the application's own /metrics."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import httpx
import pytest

from horae.api.app import create_app
from horae.api.auth import StaticTokens
from tests.support.metrics import parse, value


async def test_refused_and_unrouted_requests_are_counted_under_the_template_they_asked_for(
    tmp_path: Path,
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("token,team\n")
    # No lifespan: nothing here reaches the store.
    app = create_app(dsn="postgresql://nobody@127.0.0.1:1/none", auth=StaticTokens(tokens))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://horae") as http:

        async def counted(route: str, method: str, status: str) -> float:
            samples = parse((await http.get("/metrics")).text)
            labels = {"route": route, "method": method, "status": status}
            return value(samples, "horae_api_requests_total", **labels)

        rerun = "/executions/{execution_id}:rerun"
        before = (await counted(rerun, "POST", "401"), await counted("unmatched", "GET", "404"))
        refused = await http.post(f"/executions/{uuid.uuid4()}:rerun")  # no token
        assert refused.status_code == 401
        unknown = await http.get("/nowhere", headers={"Authorization": "Bearer token"})
        assert unknown.status_code == 404
        after = (await counted(rerun, "POST", "401"), await counted("unmatched", "GET", "404"))
        assert (after[0] - before[0], after[1] - before[1]) == (1, 1)
        assert await counted("/metrics", "GET", "200") >= 4


async def test_each_request_is_logged_once_without_its_token_or_query(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret-token,team\n")
    app = create_app(dsn="postgresql://nobody@127.0.0.1:1/none", auth=StaticTokens(tokens))
    transport = httpx.ASGITransport(app=app)
    caplog.set_level(logging.DEBUG, logger="horae.api.metering")
    async with httpx.AsyncClient(transport=transport, base_url="http://horae") as http:
        refused = await http.get("/jobs?secret=q1", headers={"Authorization": "Bearer wrong"})
        assert refused.status_code == 401
        await http.get("/nowhere?secret=q2", headers={"Authorization": "Bearer s3cret-token"})
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [(level, text.rsplit(" ", 1)[0]) for level, text in lines] == [
        (logging.INFO, "GET /jobs 401"),  # refusals at INFO, the gate's too
        (logging.INFO, "GET /nowhere 404"),
    ]
    assert all(text.endswith("ms") for _, text in lines)
    assert not any("s3cret" in text or "secret=" in text for _, text in lines)

"""Schemathesis over the OpenAPI document of a real `horae api` process (bounded):
no 5xx, and every response conforms to the documented schema."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import checks

from tests.support.kube import free_port
from tests.support.processes import HORAE, REPO

TOKEN = "fuzz-token"


@pytest.fixture
def api_url(db_url: str, tmp_path: Path) -> Iterator[str]:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN},fuzz\n")
    port = free_port()
    log = (tmp_path / "api.log").open("wb")
    proc = subprocess.Popen(
        [HORAE, "api", "--port", str(port)],
        env={**os.environ, "HORAE_DATABASE_URL": db_url, "HORAE_API_TOKENS_FILE": str(tokens),
             "HORAE_API_KUBERNETES_AUTH": "false", "HORAE_LOG_LEVEL": "WARNING"},
        stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                break
            subprocess.run(["sleep", "0.1"], check=True)  # the server is another process
        else:
            raise AssertionError("horae api did not become ready")
        assert proc.poll() is None, (tmp_path / "api.log").read_text()
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        print((tmp_path / "api.log").read_text(), file=sys.stderr)


def test_no_input_makes_the_api_fail_or_break_its_schema(api_url: str) -> None:
    schema = schemathesis.openapi.from_url(f"{api_url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10, "the OpenAPI document lost its operations"
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=25, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        def check(case: Any) -> None:
            # Semantic rules (exactly one of run_at/cron, a valid time zone, ...) are not
            # expressible in the schema, so a 422 for schema-valid data is fine here.
            case.call_and_validate(
                headers={"Authorization": f"Bearer {TOKEN}"},
                excluded_checks=[checks.positive_data_acceptance],
            )

        check()

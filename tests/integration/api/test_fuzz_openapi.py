"""Schemathesis over the OpenAPI document of a real `horae api` process (bounded):
no 5xx, and every response conforms to the documented schema."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import checks

from tests.integration.api.conftest import FUZZ_TOKEN as TOKEN


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

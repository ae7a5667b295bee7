from __future__ import annotations

from pathlib import Path

from horae.api.docs import build_openapi, render

REPO = Path(__file__).resolve().parents[2]


def test_checked_in_api_docs_match_the_generator() -> None:
    on_disk = (REPO / "docs" / "api.md").read_text()
    assert on_disk == render(), "docs/api.md is stale: run `make docs`"


def test_every_operation_of_the_openapi_document_is_documented() -> None:
    page = render()
    for path, operations in build_openapi()["paths"].items():
        for method in operations:
            assert f"### `{method.upper()} {path}`" in page

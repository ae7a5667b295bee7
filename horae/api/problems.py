"""RFC 9457 problem details: every error the API returns is `application/problem+json`
with a field-level reason where one applies."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from horae.domain import fields
from horae.domain.backfills import InvalidBackfill
from horae.errors import Conflict, NotFound, QuotaExceeded

PROBLEM = "application/problem+json"


class Problem(Exception):
    def __init__(
        self,
        status: int,
        title: str,
        detail: str,
        *,
        errors: list[dict[str, str]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.errors = errors or []
        self.headers = headers


def invalid(field: str, message: str, status: int = 422) -> Problem:
    return Problem(
        status,
        "Invalid request",
        f"{field}: {message}",
        errors=[{"field": field, "message": message}],
    )


def _slug(title: str) -> str:
    return title.lower().replace(" ", "-")


def problem_response(p: Problem) -> JSONResponse:
    body: dict[str, Any] = {
        "type": f"https://horae.dev/problems/{_slug(p.title)}",
        "title": p.title,
        "status": p.status,
        "detail": p.detail,
    }
    if p.errors:
        body["errors"] = p.errors
    return JSONResponse(body, status_code=p.status, media_type=PROBLEM, headers=p.headers)


REQUEST_PARTS = ("body", "query", "path", "header")
"""Where FastAPI locates a request's errors before the field: left out of the path."""


def field_path(loc: tuple[int | str, ...] | list[int | str]) -> str:
    return fields.field_path(part for part in loc if part not in REQUEST_PARTS)


def install(app: FastAPI) -> None:
    @app.exception_handler(Problem)
    async def _problem(_: Request, exc: Problem) -> JSONResponse:
        return problem_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = []
        status = 422
        for e in exc.errors():
            msg = str(e.get("msg", "invalid"))
            field = field_path(e.get("loc", ()))
            if e.get("type") == "too_long" and field == "jobs":
                status = 413  # a batch over its size, as documented
            if e.get("type") == "extra_forbidden":
                msg = "unknown field"
            elif e.get("type") == "json_invalid":  # loc is ("body", offset): name the body
                field, msg = "body", f"not valid JSON: {e.get('ctx', {}).get('error', msg)}"
            errors.append({"field": field, "message": msg})
        first = errors[0] if errors else {"field": "body", "message": "invalid"}
        return problem_response(
            Problem(
                status, "Invalid request", f"{first['field']}: {first['message']}", errors=errors
            )
        )

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound) -> JSONResponse:
        return problem_response(Problem(404, "Not found", str(exc)))

    @app.exception_handler(Conflict)
    async def _conflict(_: Request, exc: Conflict) -> JSONResponse:
        return problem_response(Problem(409, "Conflict", str(exc)))

    @app.exception_handler(InvalidBackfill)
    async def _backfill(_: Request, exc: InvalidBackfill) -> JSONResponse:
        return problem_response(invalid(exc.field, str(exc)))

    @app.exception_handler(QuotaExceeded)
    async def _quota(_: Request, exc: QuotaExceeded) -> JSONResponse:
        return problem_response(
            Problem(
                429, "Quota exceeded", str(exc), errors=[{"field": exc.quota, "message": str(exc)}]
            )
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # FastAPI could not read the body (not UTF-8, ...)
            return problem_response(invalid("body", "not valid JSON (UTF-8)"))
        if exc.status_code == 413:  # a streamed body went past the app's max_body_size
            return problem_response(invalid("body", "request body too large", 413))
        title = {404: "Not found", 405: "Method not allowed"}.get(exc.status_code, "Error")
        return problem_response(Problem(exc.status_code, title, str(exc.detail)))

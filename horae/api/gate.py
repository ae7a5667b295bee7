"""The gate every request passes before the application reads a byte of its body.

FastAPI reads and parses a request's body before any dependency runs, so a check of the
bearer token in a dependency comes too late: an anonymous 32 MiB batch of `{}` was parsed
whole (~750 MiB) before it was refused with 401. `Gate` is an ASGI middleware, in front of
the application, that

1. authenticates the bearer token of every route but the public ones (probes, metrics,
   the OpenAPI document and the schedule preview), answering 401 without reading the
   body; the caller it found is handed on in the scope, so the route's authorization
   (SubjectAccessReview, in `routes.access`) does not review the token again;
2. bounds the body by route: by Content-Length at once, and while it streams in
   (chunked uploads), 413 naming `body` either way. Only `POST /jobs:batch` may send the
   batch limit, and only once authenticated;
3. admits complete bodies to parsing within a byte budget shared by all requests, so
   many large requests at once cannot add up past the process's memory.

Authorization (which verbs in which tenant) stays with the routes: it needs the tenant,
which the route's header decides.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from horae.api.auth import Authenticator, Caller
from horae.api.problems import Problem, invalid, problem_response

CALLER_KEY = "horae.caller"
"""Scope key of the authenticated `Caller` (absent on public routes)."""


@dataclass(frozen=True)
class BodyLimits:
    """Largest request body, in bytes, by route. The worst case of a body is JSON made of
    tiny containers (`[{},{},...]`): parsed, it takes about 25 times its size in memory, so
    these limits bound what one request can cost (`bench/body_memory.py` measures it)."""

    batch: int = 8 * 1024 * 1024
    """`POST /jobs:batch`, authenticated callers only: up to 1,000 jobs of ~8 KiB each."""
    single: int = 1024 * 1024
    """Every other authenticated route (a create, an edit, a tenant limit): a 256 KiB
    payload (MAX_PAYLOAD_BYTES, serialized compactly) with room for indentation."""
    public: int = 16 * 1024
    """Routes anyone may call (`POST /schedules:preview`)."""
    parsing: int = 8 * 1024 * 1024
    """Bytes of complete bodies parsed and handled at once, over all requests (one batch
    at the limit, about 210 MiB of parsing); a body that arrives past it waits. Bodies
    still arriving hold none of it (a slow sender cannot block others), and it bounds
    the whole process's parsing memory."""


class _ParseBudget:
    """A semaphore counted in bytes."""

    def __init__(self, total: int) -> None:
        self._total = total
        self._used = 0
        self._changed = asyncio.Condition()

    async def acquire(self, size: int) -> int:
        size = min(size, self._total)
        async with self._changed:
            await self._changed.wait_for(lambda: self._used + size <= self._total)
            self._used += size
        return size

    async def release(self, size: int) -> None:
        async with self._changed:
            self._used -= size
            self._changed.notify_all()


PUBLIC_PATHS = frozenset(
    {
        "/healthz",
        "/readyz",
        "/openapi.json",
        "/docs",
        "/docs/oauth2-redirect",
        "/redoc",
        "/schedules:preview",
    }
)


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or path == "/metrics" or path.startswith("/metrics/")


def bearer_token(authorization: str) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header, or None."""
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def unauthorized(detail: str) -> Problem:
    return Problem(401, "Unauthorized", detail, headers={"WWW-Authenticate": "Bearer"})


class Gate:
    def __init__(self, app: ASGIApp, *, auth: Authenticator, limits: BodyLimits) -> None:
        self.app = app
        self.auth = auth
        self.limits = limits
        self.budget = _ParseBudget(limits.parsing)

    def limit(self, method: str, path: str) -> int:
        if is_public(path):
            return self.limits.public
        if method == "POST" and path == "/jobs:batch":
            return self.limits.batch
        return self.limits.single

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        headers = {k.lower(): v for k, v in scope["headers"]}
        try:
            if not is_public(path):
                scope[CALLER_KEY] = await self._caller(headers.get(b"authorization", b""))
            limit = self.limit(scope["method"], path)
            length = headers.get(b"content-length")
            if length is not None and length.isdigit() and int(length) > limit:
                raise invalid("body", f"request body over {limit} bytes", 413)
        except Problem as problem:
            await problem_response(problem)(scope, receive, send)
            return
        body = _Body(receive, limit, self.budget)
        try:
            await self.app(scope, body.receive, send)
        finally:
            await body.done()

    async def _caller(self, authorization: bytes) -> Caller:
        token = bearer_token(authorization.decode("latin-1"))
        if token is None:
            raise unauthorized("a bearer token is required")
        caller = await self.auth.caller(token)
        if caller is None:
            raise unauthorized("the bearer token is not valid")
        return caller


class _Body:
    """The request's `receive`, refusing a body that streams past `limit` (no
    Content-Length, or a false one) before the application holds more than `limit` bytes
    of it; once the body is complete, it takes its size from the parse budget until the
    request is done."""

    def __init__(self, receive: Receive, limit: int, budget: _ParseBudget) -> None:
        self._receive = receive
        self._limit = limit
        self._budget = budget
        self._seen = 0
        self._held = 0

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.request":
            self._seen += len(message.get("body", b""))
            if self._seen > self._limit:
                # fastapi's HTTPException: FastAPI passes it on from a body read, and the
                # problems handler answers it as 413 naming `body`.
                raise HTTPException(413, f"request body over {self._limit} bytes")
            if not message.get("more_body", False) and self._seen and not self._held:
                self._held = await self._budget.acquire(self._seen)
        return message

    async def done(self) -> None:
        if self._held:
            await self._budget.release(self._held)
            self._held = 0

"""Who is calling and may they: bearer tokens checked with TokenReview, each call
authorized with SubjectAccessReview (group horae.dev, resource `jobs`, namespace =
tenant). A static token file serves local development only and is off unless set.

A caller's tenant is the `Horae-Tenant` header, or else the namespace of its
ServiceAccount (or the tenant its static token names).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from horae.api.problems import Problem
from horae.kube import ReviewedUser, Reviews

log = logging.getLogger(__name__)

TOKEN_CACHE_SECONDS = 30.0
ACCESS_CACHE_SECONDS = 10.0


@dataclass(frozen=True)
class Caller:
    name: str
    default_tenant: str | None
    user: ReviewedUser | None = None
    static_tenants: frozenset[str] = frozenset()
    static_verbs: frozenset[str] = frozenset()


class Authenticator(Protocol):
    async def caller(self, token: str) -> Caller | None: ...
    async def allowed(self, caller: Caller, verb: str, resource: str, tenant: str) -> bool: ...


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class KubernetesAuth:
    """TokenReview + SubjectAccessReview, with short-lived caches (tokens by digest)."""

    def __init__(self, reviews: Reviews) -> None:
        self._reviews = reviews
        self._tokens: dict[str, tuple[float, ReviewedUser | None]] = {}
        self._access: dict[tuple[str, str, str, str], tuple[float, bool]] = {}

    async def caller(self, token: str) -> Caller | None:
        key = _digest(token)
        now = time.monotonic()
        hit = self._tokens.get(key)
        if hit is None or now - hit[0] > TOKEN_CACHE_SECONDS:
            try:
                user = await self._reviews.token(token)
            except Exception as exc:
                log.exception("TokenReview failed")
                raise Problem(503, "Unavailable", "cannot verify tokens right now") from exc
            if len(self._tokens) > 10_000:
                self._tokens.clear()
            self._tokens[key] = hit = (now, user)
        user = hit[1]
        if user is None:
            return None
        return Caller(user.username, user.service_account_namespace, user=user)

    async def allowed(self, caller: Caller, verb: str, resource: str, tenant: str) -> bool:
        assert caller.user is not None
        key = (caller.user.uid or caller.name, verb, resource, tenant)
        now = time.monotonic()
        hit = self._access.get(key)
        if hit is None or now - hit[0] > ACCESS_CACHE_SECONDS:
            try:
                ok = await self._reviews.allowed(
                    caller.user, verb=verb, resource=resource, namespace=tenant
                )
            except Exception as exc:
                log.exception("SubjectAccessReview failed")
                raise Problem(503, "Unavailable", "cannot authorize right now") from exc
            if len(self._access) > 10_000:
                self._access.clear()
            self._access[key] = hit = (now, ok)
        return hit[1]


class StaticTokens:
    """Local development only: lines `token,tenant[,verb verb ...]` in a file."""

    def __init__(self, path: Path) -> None:
        self._callers: dict[str, Caller] = {}
        for number, line in enumerate(path.read_text().splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = [p.strip() for p in line.split(",")]
            if len(parts) < 2 or not parts[0] or not parts[1]:
                raise ValueError(f"{path}:{number}: expected token,tenant[,verbs]")
            verbs = (
                frozenset(parts[2].split())
                if len(parts) > 2 and parts[2]
                else frozenset({"create", "get", "list", "update", "delete"})
            )
            self._callers[_digest(parts[0])] = Caller(
                f"static:{parts[1]}", parts[1], static_tenants=frozenset({parts[1]}),
                static_verbs=verbs,
            )  # fmt: skip

    async def caller(self, token: str) -> Caller | None:
        return self._callers.get(_digest(token))

    async def allowed(self, caller: Caller, verb: str, resource: str, tenant: str) -> bool:
        return tenant in caller.static_tenants and verb in caller.static_verbs


class Chain:
    """Static tokens first (when configured), then the Kubernetes API."""

    def __init__(self, *authenticators: Authenticator) -> None:
        self._chain = authenticators

    async def caller(self, token: str) -> Caller | None:
        for auth in self._chain:
            found = await auth.caller(token)
            if found is not None:
                return found
        return None

    async def allowed(self, caller: Caller, verb: str, resource: str, tenant: str) -> bool:
        if caller.user is None:
            return tenant in caller.static_tenants and verb in caller.static_verbs
        for auth in self._chain:
            if isinstance(auth, KubernetesAuth):
                return await auth.allowed(caller, verb, resource, tenant)
        return False

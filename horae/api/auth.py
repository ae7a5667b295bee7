"""Who is calling and may they: bearer tokens checked with TokenReview, each call
authorized with SubjectAccessReview (group horae.dev, resource `jobs`, namespace =
tenant; resource `tenants` cluster-wide, for tenant limits). A static token file serves
local development only and is off unless set (verb `admin` on a line grants tenant limits).

A caller's tenant is the `Horae-Tenant` header, or else the namespace of its
ServiceAccount (or the tenant its static token names).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from horae.api.problems import Problem
from horae.kube import ReviewedUser, Reviews

log = logging.getLogger(__name__)

CLUSTER = ""
"""The `tenant` an authorization is asked for when it must be granted cluster-wide (a
SubjectAccessReview with no namespace: only ClusterRoleBindings count)."""

ADMIN_VERB = "admin"
"""A static token's verb for cluster-wide permissions (tenant limits)."""

TOKEN_CACHE_SECONDS = 30.0
ACCESS_CACHE_SECONDS = 10.0

K = TypeVar("K")
V = TypeVar("V")


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


class _TtlCache(Generic[K, V]):
    """A small time-bounded cache; cleared whole when it grows past `size`."""

    def __init__(self, ttl: float, size: int = 10_000) -> None:
        self._ttl = ttl
        self._size = size
        self._items: dict[K, tuple[float, V]] = {}

    async def get(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        now = time.monotonic()
        hit = self._items.get(key)
        if hit is not None and now - hit[0] <= self._ttl:
            return hit[1]
        value = await load()
        if len(self._items) >= self._size:
            self._items.clear()
        self._items[key] = (now, value)
        return value


class KubernetesAuth:
    """TokenReview + SubjectAccessReview, with short-lived caches (tokens by digest)."""

    def __init__(self, reviews: Reviews) -> None:
        self._reviews = reviews
        self._tokens: _TtlCache[str, ReviewedUser | None] = _TtlCache(TOKEN_CACHE_SECONDS)
        self._access: _TtlCache[tuple[str, str, str, str], bool] = _TtlCache(ACCESS_CACHE_SECONDS)

    async def caller(self, token: str) -> Caller | None:
        async def review() -> ReviewedUser | None:
            try:
                return await self._reviews.token(token)
            except Exception as exc:
                log.exception("TokenReview failed")
                raise Problem(503, "Unavailable", "cannot verify tokens right now") from exc

        user = await self._tokens.get(_digest(token), review)
        if user is None:
            return None
        return Caller(user.username, user.service_account_namespace, user=user)

    async def allowed(self, caller: Caller, verb: str, resource: str, tenant: str) -> bool:
        user = caller.user
        assert user is not None

        async def review() -> bool:
            try:
                return await self._reviews.allowed(
                    user, verb=verb, resource=resource, namespace=tenant
                )
            except Exception as exc:
                log.exception("SubjectAccessReview failed")
                raise Problem(503, "Unavailable", "cannot authorize right now") from exc

        return await self._access.get((user.uid or caller.name, verb, resource, tenant), review)


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
        return _static_allowed(caller, verb, tenant)


def _static_allowed(caller: Caller, verb: str, tenant: str) -> bool:
    if tenant == CLUSTER:
        return ADMIN_VERB in caller.static_verbs
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
            return _static_allowed(caller, verb, tenant)
        for auth in self._chain:
            if isinstance(auth, KubernetesAuth):
                return await auth.allowed(caller, verb, resource, tenant)
        return False

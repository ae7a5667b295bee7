"""Who is calling and may they: bearer tokens checked with TokenReview, each call
authorized with SubjectAccessReview (group horae.dev, resource `jobs`, namespace =
tenant; resource `tenants` cluster-wide, for tenant limits). A static token file serves
local development only and is off unless set (verb `admin` on a line grants tenant limits).

A caller's tenant is the `Horae-Tenant` header, or else the namespace of its
ServiceAccount (or the tenant its static token names).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
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


@dataclass(frozen=True, kw_only=True)
class ReviewLimits:
    """How much reviewing the API does for callers, and how long it remembers."""

    token_seconds: float = 30.0
    """Seconds a token's review (good or bad) is remembered."""
    access_seconds: float = 10.0
    """Seconds a SubjectAccessReview's answer is remembered."""
    entries: int = 10_000
    """Entries in each cache (good tokens, bad tokens, access answers); least recently
    used first out. Bad tokens have their own cache, so a flood of them cannot evict a
    good one."""
    reviews_per_second: float = 100.0
    """HORAE_API_TOKEN_REVIEWS_PER_SECOND: TokenReviews of tokens not remembered, a second
    on average (bursts of as many); past it an unknown token is answered 503 with
    Retry-After, so a flood of made-up tokens costs the API server a bounded load."""
    reviews_in_flight: int = 32
    """TokenReviews at once; past it, 503 with Retry-After too."""


class _Lru(Generic[K, V]):
    """A bounded, time-limited cache: the least recently used entry goes when it is full."""

    def __init__(self, ttl: float, size: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._size = size
        self._clock = clock
        self._items: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> tuple[bool, V | None]:
        """(True, value) when `key` is remembered and fresh, else (False, None)."""
        hit = self._items.get(key)
        if hit is None:
            return False, None
        if self._clock() - hit[0] > self._ttl:
            del self._items[key]
            return False, None
        self._items.move_to_end(key)
        return True, hit[1]

    def put(self, key: K, value: V) -> None:
        self._items[key] = (self._clock(), value)
        self._items.move_to_end(key)
        while len(self._items) > self._size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


class _Budget:
    """A token bucket: `rate` takes a second on average, in bursts of up to `rate`."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = rate
        self._clock = clock
        self._tokens = rate
        self._stamp = clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self._rate, self._tokens + (now - self._stamp) * self._rate)
        self._stamp = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


def _busy(detail: str) -> Problem:
    return Problem(503, "Unavailable", detail, headers={"Retry-After": "1"})


AccessKey = tuple[str, str, tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...], str, str, str]


def access_key(user: ReviewedUser, verb: str, resource: str, tenant: str) -> AccessKey:
    """Everything a SubjectAccessReview's answer depends on: the whole identity (name, uid,
    groups, extra) and the request; a cached answer can never serve another identity."""
    extra = tuple(sorted((k, tuple(v)) for k, v in user.extra.items()))
    return (user.username, user.uid, tuple(sorted(user.groups)), extra, verb, resource, tenant)


class KubernetesAuth:
    """TokenReview + SubjectAccessReview, with bounded caches (tokens by digest) and a
    bounded budget of TokenReviews for tokens it does not remember."""

    def __init__(self, reviews: Reviews, limits: ReviewLimits | None = None) -> None:
        limits = limits or ReviewLimits()
        self._reviews = reviews
        self._limits = limits
        self._good: _Lru[str, ReviewedUser] = _Lru(limits.token_seconds, limits.entries)
        self._bad: _Lru[str, bool] = _Lru(limits.token_seconds, limits.entries)
        self._access: _Lru[AccessKey, bool] = _Lru(limits.access_seconds, limits.entries)
        self._budget = _Budget(limits.reviews_per_second)
        self._reviewing: dict[str, asyncio.Future[ReviewedUser | None]] = {}

    async def caller(self, token: str) -> Caller | None:
        digest = _digest(token)
        found, user = self._good.get(digest)
        if not found and self._bad.get(digest)[0]:
            return None
        if user is None:
            # Concurrent first requests with one token share its review.
            review = self._reviewing.get(digest)
            if review is None:
                if len(self._reviewing) >= self._limits.reviews_in_flight:
                    raise _busy("too many tokens being verified right now; retry shortly")
                if not self._budget.take():
                    raise _busy("too many unknown tokens to verify right now; retry shortly")
                review = asyncio.ensure_future(self._review(token, digest))
                self._reviewing[digest] = review
                review.add_done_callback(lambda _: self._reviewing.pop(digest, None))
            user = await asyncio.shield(review)
        if user is None:
            return None
        return Caller(user.username, user.service_account_namespace, user=user)

    async def _review(self, token: str, digest: str) -> ReviewedUser | None:
        try:
            user = await self._reviews.token(token)
        except Exception as exc:
            log.exception("TokenReview failed")
            raise _busy("cannot verify tokens right now") from exc
        if user is None:
            self._bad.put(digest, True)
        else:
            self._good.put(digest, user)
        return user

    async def allowed(self, caller: Caller, verb: str, resource: str, tenant: str) -> bool:
        user = caller.user
        assert user is not None
        key = access_key(user, verb, resource, tenant)
        found, answer = self._access.get(key)
        if found and answer is not None:
            return answer
        try:
            answer = await self._reviews.allowed(
                user, verb=verb, resource=resource, namespace=tenant
            )
        except Exception as exc:
            log.exception("SubjectAccessReview failed")
            raise Problem(503, "Unavailable", "cannot authorize right now") from exc
        self._access.put(key, answer)
        return answer


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
                f"static:{parts[1]}",
                parts[1],
                static_tenants=frozenset({parts[1]}),
                static_verbs=verbs,
            )

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

"""Who asks and whether they may: the aggregation layer's front-proxy identity and a
SubjectAccessReview per namespace.

kube-apiserver authenticates the user, then proxies the request over TLS with its
front-proxy client certificate and names the user in request headers (X-Remote-User,
X-Remote-Group, X-Remote-Extra-*). Those headers are believed only on a connection whose
client certificate the request-header CA signed (checked in the TLS handshake: the server
requires one) and whose common name is one the API server allows. Then the API server
decides, through a SubjectAccessReview, whether that user may get, list or watch
executions in the namespace; answers are kept for a few seconds, as Kubernetes's own
delegated authorizer keeps them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from horae.aggregated.resource import GROUP, PLURAL
from horae.kube import FrontProxy, ReviewedUser, Reviews

ALLOWED_TTL = 10.0
"""Seconds an allowing review is reused (Kubernetes's delegated authorizer: 10 s)."""
DENIED_TTL = 10.0
"""Seconds a denying review is reused."""


class Unauthenticated(Exception):
    """No front-proxy identity on the request (401)."""


def identity(
    headers: Sequence[tuple[bytes, bytes]], client_cn: str | None, proxy: FrontProxy
) -> ReviewedUser:
    """The user the front proxy names; Unauthenticated when the connection's certificate
    is not an allowed front proxy's or no username header is set."""
    if client_cn is None:
        raise Unauthenticated("no client certificate from the aggregation layer")
    if proxy.allowed_names and client_cn not in proxy.allowed_names:
        raise Unauthenticated(f"client certificate {client_cn!r} is not an allowed front proxy")
    values: dict[str, list[str]] = {}
    for raw_name, raw_value in headers:
        values.setdefault(raw_name.decode("latin-1").lower(), []).append(
            raw_value.decode("latin-1")
        )
    username = next(
        (values[h.lower()][0] for h in proxy.username_headers if values.get(h.lower())), ""
    )
    if not username:
        raise Unauthenticated("no user named by the aggregation layer")
    groups = [g for h in proxy.group_headers for g in values.get(h.lower(), [])]
    extra: dict[str, list[str]] = {}
    for name, found in values.items():
        for prefix in proxy.extra_prefixes:
            if name.startswith(prefix.lower()):
                key = unquote(name[len(prefix) :])
                extra.setdefault(key, []).extend(found)
    return ReviewedUser(username=username, uid="", groups=tuple(groups), extra=extra)


@dataclass
class _Answer:
    allowed: bool
    until: float


class Authorizer:
    """SubjectAccessReview on `executions` of runs.horae.dev, answers kept briefly."""

    def __init__(self, reviews: Reviews, *, most: int = 10_000) -> None:
        self._reviews = reviews
        self._answers: dict[tuple[object, ...], _Answer] = {}
        self._most = most

    async def allowed(self, user: ReviewedUser, *, verb: str, namespace: str | None) -> bool:
        """Whether `user` may `verb` executions in `namespace` (None: in every one)."""
        key = (user.username, user.groups, _frozen(user.extra), verb, namespace or "")
        now = time.monotonic()
        answer = self._answers.get(key)
        if answer is not None and answer.until > now:
            return answer.allowed
        allowed = await self._reviews.allowed(
            user, verb=verb, resource=PLURAL, namespace=namespace or "", group=GROUP
        )
        if len(self._answers) >= self._most:
            self._answers = {k: a for k, a in self._answers.items() if a.until > now}
            if len(self._answers) >= self._most:
                self._answers.clear()
        self._answers[key] = _Answer(allowed, now + (ALLOWED_TTL if allowed else DENIED_TTL))
        return allowed


def _frozen(extra: Mapping[str, list[str]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple(sorted((k, tuple(v)) for k, v in extra.items()))

"""`Reviews`: TokenReview and SubjectAccessReview, so the API server decides who and what."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes import client

from horae.kube.calling import call
from horae.resources import GROUP


@dataclass(frozen=True)
class ReviewedUser:
    """Who a bearer token belongs to, as the API server's TokenReview says."""

    username: str
    uid: str
    groups: tuple[str, ...]
    extra: dict[str, list[str]]

    @property
    def service_account_namespace(self) -> str | None:
        parts = self.username.split(":")
        if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
            return parts[2]
        return None


class Reviews:
    """TokenReview and SubjectAccessReview: the API server decides who and what."""

    def __init__(self, api: client.ApiClient, *, audiences: tuple[str, ...] = ()) -> None:
        """`audiences`: the audiences a token must be meant for (TokenReview
        spec.audiences); empty: the API server's own, so any token for the Kubernetes API
        is accepted."""
        self._authn = client.AuthenticationV1Api(api)
        self._authz = client.AuthorizationV1Api(api)
        self._audiences = audiences

    async def token(self, token: str) -> ReviewedUser | None:
        spec: dict[str, Any] = {"token": token}
        if self._audiences:
            spec["audiences"] = list(self._audiences)
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        result = await call(self._authn.create_token_review, body)
        status = result.status
        if not status or not status.authenticated or status.user is None:
            return None
        # An authenticator that does not know audiences answers without checking them: the
        # review holds only if the token's audiences meet ours (the TokenReview contract).
        if self._audiences and not set(status.audiences or ()) & set(self._audiences):
            return None
        user = status.user
        return ReviewedUser(
            username=user.username or "",
            uid=user.uid or "",
            groups=tuple(user.groups or ()),
            extra={k: list(v) for k, v in (user.extra or {}).items()},
        )

    async def allowed(
        self,
        user: ReviewedUser,
        *,
        verb: str,
        resource: str,
        namespace: str,
        group: str = GROUP,
        version: str = "",
    ) -> bool:
        """Whether `user` may `verb` `resource` of API group `group` in `namespace` (empty:
        across every namespace)."""
        attributes = {"group": group, "resource": resource, "verb": verb, "namespace": namespace}
        if version:
            attributes["version"] = version
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user.username,
                "uid": user.uid,
                "groups": list(user.groups),
                "extra": user.extra,
                "resourceAttributes": attributes,
            },
        }
        result = await call(self._authz.create_subject_access_review, body)
        return bool(result.status and result.status.allowed)

"""Kubernetes API access for Horae's components: configuration, Leases, status, Events.

The official `kubernetes` client is synchronous; every call here runs in a
worker thread so the components' event loops never block on the API server.
API errors are translated at this boundary: 409 -> `LeaseConflict`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from horae.errors import HoraeError

GROUP = "horae.dev"
VERSION = "v1alpha1"


class LeaseConflict(HoraeError):
    """Someone else changed or created the Lease first."""


def load_api_client(kubeconfig: str | None, *, connections: int = 32) -> client.ApiClient:
    """An API client from a kubeconfig path, else from the in-cluster service account.

    `connections` sizes the HTTP connection pool: Lease renewals run concurrently.
    """
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration)


@dataclass(frozen=True)
class Lease:
    name: str
    holder: str | None
    resource_version: str
    labels: dict[str, str]


def _lease(obj: Any) -> Lease:
    return Lease(
        name=obj.metadata.name,
        holder=obj.spec.holder_identity or None,
        resource_version=obj.metadata.resource_version,
        labels=dict(obj.metadata.labels or {}),
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Leases:
    """Lease objects in one namespace, optimistic-concurrency writes only."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self._api = client.CoordinationV1Api(api)
        self.namespace = namespace

    async def list(self, selector: str) -> list[Lease]:
        result = await asyncio.to_thread(
            self._api.list_namespaced_lease,
            self.namespace,
            label_selector=selector,
            _request_timeout=10,
        )
        return [_lease(item) for item in result.items]

    async def create(
        self, name: str, holder: str | None, duration_s: int, labels: dict[str, str]
    ) -> Lease:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": duration_s,
                "acquireTime": _now(),
                "renewTime": _now(),
                "leaseTransitions": 0,
            },
        }
        try:
            obj = await asyncio.to_thread(
                self._api.create_namespaced_lease, self.namespace, body, _request_timeout=10
            )
        except ApiException as exc:
            if exc.status == 409:
                raise LeaseConflict(name) from exc
            raise
        return _lease(obj)

    async def write(
        self, lease: Lease, holder: str | None, duration_s: int, *, acquire: bool
    ) -> Lease:
        """Renew, take (acquire=True) or release (holder=None) a Lease seen at `lease`."""
        spec: dict[str, Any] = {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration_s,
            "renewTime": _now(),
        }
        if acquire:
            spec["acquireTime"] = _now()
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": lease.name,
                "resourceVersion": lease.resource_version,
                "labels": lease.labels,
            },
            "spec": spec,
        }
        try:
            obj = await asyncio.to_thread(
                self._api.replace_namespaced_lease,
                lease.name,
                self.namespace,
                body,
                _request_timeout=10,
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                raise LeaseConflict(lease.name) from exc
            raise
        return _lease(obj)

    async def delete(self, name: str) -> None:
        try:
            await asyncio.to_thread(
                self._api.delete_namespaced_lease, name, self.namespace, _request_timeout=10
            )
        except ApiException as exc:
            if exc.status != 404:
                raise


class CustomObjects:
    """Reads and writes of Horae's custom resources."""

    def __init__(self, api: client.ApiClient) -> None:
        self._api = client.CustomObjectsApi(api)

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> bool:
        """Merge-patch `status`; False when the object is gone."""
        try:
            await asyncio.to_thread(
                self._api.patch_namespaced_custom_object_status,
                GROUP,
                VERSION,
                namespace,
                plural,
                name,
                {"status": status},
                _request_timeout=10,
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def list(
        self, plural: str, namespace: str, *, label_selector: str = ""
    ) -> list[dict[str, Any]]:
        result = await asyncio.to_thread(
            self._api.list_namespaced_custom_object, GROUP, VERSION, namespace, plural,
            label_selector=label_selector, _request_timeout=30,
        )  # fmt: skip
        return list(result["items"])

    async def upsert(self, plural: str, namespace: str, name: str, body: dict[str, Any]) -> None:
        """Create the object, or merge-patch it when it exists."""
        try:
            await asyncio.to_thread(
                self._api.create_namespaced_custom_object, GROUP, VERSION, namespace, plural,
                body, _request_timeout=10,
            )  # fmt: skip
        except ApiException as exc:
            if exc.status != 409:
                raise
            await asyncio.to_thread(
                self._api.patch_namespaced_custom_object, GROUP, VERSION, namespace, plural,
                name, body, _request_timeout=10,
            )  # fmt: skip

    async def delete(self, plural: str, namespace: str, name: str) -> None:
        try:
            await asyncio.to_thread(
                self._api.delete_namespaced_custom_object, GROUP, VERSION, namespace, plural,
                name, _request_timeout=10,
            )  # fmt: skip
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def delete_all(self, plural: str, namespace: str, *, label_selector: str) -> None:
        await asyncio.to_thread(
            self._api.delete_collection_namespaced_custom_object, GROUP, VERSION, namespace,
            plural, label_selector=label_selector, _request_timeout=30,
        )  # fmt: skip


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

    def __init__(self, api: client.ApiClient) -> None:
        self._authn = client.AuthenticationV1Api(api)
        self._authz = client.AuthorizationV1Api(api)

    async def token(self, token: str) -> ReviewedUser | None:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token}}  # fmt: skip
        result = await asyncio.to_thread(self._authn.create_token_review, body, _request_timeout=10)
        status = result.status
        if not status or not status.authenticated or status.user is None:
            return None
        user = status.user
        return ReviewedUser(
            username=user.username or "",
            uid=user.uid or "",
            groups=tuple(user.groups or ()),
            extra={k: list(v) for k, v in (user.extra or {}).items()},
        )

    async def allowed(
        self, user: ReviewedUser, *, verb: str, resource: str, namespace: str
    ) -> bool:
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user.username,
                "uid": user.uid,
                "groups": list(user.groups),
                "extra": user.extra,
                "resourceAttributes": {
                    "group": GROUP, "resource": resource, "verb": verb, "namespace": namespace,
                },
            },
        }  # fmt: skip
        result = await asyncio.to_thread(
            self._authz.create_subject_access_review, body, _request_timeout=10
        )
        return bool(result.status and result.status.allowed)


def watch_leases(
    api: client.ApiClient,
    namespace: str,
    selector: str,
    on_change: Callable[[str, Lease], None],
    stop: threading.Event,
) -> None:
    """Blocking: stream Lease changes to `on_change(event_type, lease)` until `stop` is set.

    Run it in a thread; it re-opens the watch when the server ends it.
    """
    from kubernetes import watch

    coordination = client.CoordinationV1Api(api)
    while not stop.is_set():
        w = watch.Watch()
        try:
            for event in w.stream(
                coordination.list_namespaced_lease, namespace, label_selector=selector,
                timeout_seconds=30, _request_timeout=40,
            ):  # fmt: skip
                on_change(event["type"], _lease(event["object"]))
                if stop.is_set():
                    break
        except Exception:
            stop.wait(1.0)
        finally:
            w.stop()


class Events:
    """Kubernetes Events on Horae's resources (what `kubectl describe` shows)."""

    def __init__(self, api: client.ApiClient, component: str = "horae-operator") -> None:
        self._core = client.CoreV1Api(api)
        self._component = component

    async def emit(
        self, *, kind: str, namespace: str, name: str, uid: str, reason: str, message: str,
        warning: bool = True,
    ) -> None:  # fmt: skip
        now = _now()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind,
                               "namespace": namespace, "name": name, "uid": uid},
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": self._component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }  # fmt: skip
        await asyncio.to_thread(
            self._core.create_namespaced_event, namespace, body, _request_timeout=10
        )

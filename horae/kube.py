"""Kubernetes API access for Horae's components: configuration, Leases, status, Events.

The official `kubernetes` client is synchronous; every call here runs in a
worker thread so the components' event loops never block on the API server.
API errors are translated at this boundary: 409 -> `LeaseConflict`, 404 -> None (or
False) where an object may be gone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from horae.errors import HoraeError

log = logging.getLogger(__name__)

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
    acquired: str | None = None
    """spec.acquireTime as the API server wrote it (a renewal sends it back unchanged)."""


def _lease(obj: dict[str, Any]) -> Lease:
    """A Lease from its JSON. Leases are read raw, not through the client's models: a
    scheduler renews a Lease per owned shard every second and watches them all, and
    building model objects (with dateutil parsing every timestamp) cost it more CPU than
    the renewals themselves (bench/profile.py)."""
    metadata, spec = obj["metadata"], obj.get("spec") or {}
    return Lease(
        name=metadata["name"],
        holder=spec.get("holderIdentity") or None,
        resource_version=metadata["resourceVersion"],
        labels=dict(metadata.get("labels") or {}),
        acquired=spec.get("acquireTime"),
    )


def _json_call(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`call(*args, **kwargs)` made with `_preload_content=False`, its JSON body parsed (no
    model objects built). The body is read here, in the calling thread, so the connection
    is back in the pool before the thread takes its next call: read later, by the event
    loop, the pool held more connections than threads and discarded the surplus."""
    return json.loads(call(*args, _preload_content=False, **kwargs).data)


T = TypeVar("T")


async def _unless_gone(call: Awaitable[T]) -> T | None:
    """What `call` returns; None when the API server answers 404 (no such object)."""
    try:
        return await call
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Leases:
    """Lease objects in one namespace, optimistic-concurrency writes only."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self._api = client.CoordinationV1Api(api)
        self.namespace = namespace

    async def list(self, selector: str) -> list[Lease]:
        result = await asyncio.to_thread(
            _json_call,
            self._api.list_namespaced_lease,
            self.namespace,
            label_selector=selector,
            _request_timeout=10,
        )
        return [_lease(item) for item in result["items"]]

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
                _json_call, self._api.create_namespaced_lease, self.namespace, body,
                _request_timeout=10,
            )  # fmt: skip
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
        elif holder is not None and lease.acquired is not None:
            # A renewal replaces the whole spec: keep when the holder acquired the Lease.
            spec["acquireTime"] = lease.acquired
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
                _json_call,
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
        await _unless_gone(
            asyncio.to_thread(
                self._api.delete_namespaced_lease, name, self.namespace, _request_timeout=10
            )
        )


class SingletonLease:
    """One Lease that one process at a time holds (partition maintenance, the operator's
    leader): holding means taking it when free or expired, renewing it otherwise.

    Expiry is judged by this process's monotonic clock, never by the holder's renewTime
    (clocks differ): a version of the Lease expires `duration` after this process first
    saw it, by `hold` or by a watch that reports it through `observe`.
    """

    SIGHTINGS = 8
    """How many versions' first sightings are remembered (a watch and a list may report
    them out of order; a forgotten one counts from its next sighting: later, so safe)."""

    def __init__(
        self, leases: Leases, name: str, *, identity: str, duration: float, label: str
    ) -> None:
        self._leases = leases
        self.name = name
        self._identity = identity
        self._duration = duration
        self._label = label
        self.selector = f"{label}=true"
        """The label selector that finds the Lease (for `watch_leases`)."""
        self._first_seen: dict[str, float] = {}
        """resourceVersion -> monotonic time this process first saw it."""

    def observe(self, lease: Lease, at: float) -> None:
        """Note a version of the Lease seen elsewhere (a watch) at monotonic time `at`."""
        if lease.name == self.name:
            self._sighted(lease.resource_version, at)

    def _sighted(self, version: str, at: float) -> float:
        since = self._first_seen.setdefault(version, at)
        while len(self._first_seen) > self.SIGHTINGS:
            del self._first_seen[next(iter(self._first_seen))]
        return since

    def expires_in(self) -> float:
        """Seconds until the newest version seen so far expires (the whole duration when
        none was seen); at or below 0 a `hold` may take it."""
        now = time.monotonic()
        return max(self._first_seen.values(), default=now) + self._duration - now

    async def hold(self) -> bool:
        """Take or renew the Lease; False when another holder's Lease is still live."""
        found = [x for x in await self._leases.list(self.selector) if x.name == self.name]
        duration = max(1, math.ceil(self._duration))
        now = time.monotonic()
        try:
            if not found:
                await self._leases.create(self.name, self._identity, duration,
                                          {self._label: "true"})  # fmt: skip
                return True
            lease = found[0]
            expired = now - self._sighted(lease.resource_version, now) > self._duration
            if lease.holder in (None, self._identity) or expired:
                await self._leases.write(lease, self._identity, duration,
                                         acquire=lease.holder != self._identity)  # fmt: skip
                return True
        except LeaseConflict:
            pass
        return False

    async def release(self) -> None:
        """Clear the holder if it is us, so another process takes over at once."""
        for lease in await self._leases.list(self.selector):
            if lease.name == self.name and lease.holder == self._identity:
                try:
                    await self._leases.write(lease, None, 1, acquire=False)
                except LeaseConflict:
                    pass


class CustomObjects:
    """Reads and writes of Horae's custom resources."""

    def __init__(self, api: client.ApiClient) -> None:
        self._api = client.CustomObjectsApi(api)

    async def _call(
        self, method: Callable[..., Any], *args: Any, timeout: float = 10, **kwargs: Any
    ) -> Any:
        """`method(GROUP, VERSION, *args)` on a thread, with a request timeout."""
        return await asyncio.to_thread(
            method, GROUP, VERSION, *args, _request_timeout=timeout, **kwargs
        )

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> bool:
        """Merge-patch `status`; False when the object is gone."""
        patched = await _unless_gone(
            self._call(
                self._api.patch_namespaced_custom_object_status,
                namespace,
                plural,
                name,
                {"status": status},
            )
        )
        return patched is not None

    async def list_all(self, plural: str) -> list[dict[str, Any]]:
        """Every object of `plural` in every namespace."""
        result = await self._call(self._api.list_cluster_custom_object, plural, timeout=60)
        return list(result["items"])

    async def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        obj = await _unless_gone(
            self._call(self._api.get_namespaced_custom_object, namespace, plural, name)
        )
        return None if obj is None else dict(obj)

    async def list(
        self, plural: str, namespace: str, *, label_selector: str = ""
    ) -> list[dict[str, Any]]:
        result = await self._call(self._api.list_namespaced_custom_object, namespace, plural,
                                  label_selector=label_selector, timeout=30)  # fmt: skip
        return list(result["items"])

    async def upsert(self, plural: str, namespace: str, name: str, body: dict[str, Any]) -> None:
        """Create the object, or merge-patch it when it exists."""
        try:
            await self._call(self._api.create_namespaced_custom_object, namespace, plural, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            await self._call(self._api.patch_namespaced_custom_object, namespace, plural, name,
                             body)  # fmt: skip

    async def delete(self, plural: str, namespace: str, name: str) -> None:
        await _unless_gone(
            self._call(self._api.delete_namespaced_custom_object, namespace, plural, name)
        )

    async def delete_all(self, plural: str, namespace: str, *, label_selector: str) -> None:
        await self._call(self._api.delete_collection_namespaced_custom_object, namespace,
                         plural, label_selector=label_selector, timeout=30)  # fmt: skip


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
        result = await asyncio.to_thread(self._authn.create_token_review, body, _request_timeout=10)
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
    backoff = 1.0
    while not stop.is_set():
        w = watch.Watch()
        try:
            for event in w.stream(
                coordination.list_namespaced_lease, namespace, label_selector=selector,
                timeout_seconds=30, _request_timeout=40, deserialize=False,
            ):  # fmt: skip
                on_change(event["type"], _lease(event["object"]))
                backoff = 1.0
                if stop.is_set():
                    break
        except Exception as exc:
            if stop.is_set():
                break
            log.warning("lease watch (%s) failed, re-opening in %.0fs: %s", selector, backoff,
                        str(exc).splitlines()[0] if str(exc) else type(exc).__name__)  # fmt: skip
            stop.wait(backoff)
            backoff = min(backoff * 2, 10.0)
        finally:
            w.stop()


class ServiceAccounts:
    """Reads of ServiceAccounts (whether a WorkerPool may run its pods as one)."""

    def __init__(self, api: client.ApiClient) -> None:
        self._core = client.CoreV1Api(api)

    async def labels(self, namespace: str, name: str) -> dict[str, str] | None:
        """The ServiceAccount's labels; None when it does not exist."""
        obj = await _unless_gone(
            asyncio.to_thread(
                self._core.read_namespaced_service_account, name, namespace, _request_timeout=10
            )
        )
        return None if obj is None else dict(obj.metadata.labels or {})


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


@dataclass(frozen=True)
class DeploymentReplicas:
    """What a Deployment asks for (`spec.replicas`) and has ready (`status.readyReplicas`)."""

    replicas: int
    ready_replicas: int
    controller_uid: str | None = None
    """uid of the object that controls it (its controller ownerReference), if any."""


class Deployments:
    """apps/v1 Deployments written by server-side apply: the operator owns the fields it
    applies (as field manager `manager`) and nothing else, so fields that users or other
    controllers set survive every reconcile, and a field it stops applying is removed.
    Replicas are not applied: they change through the scale subresource only.
    """

    def __init__(self, api: client.ApiClient, *, manager: str = "horae-operator") -> None:
        self._client = api
        self._apps = client.AppsV1Api(api)
        self._manager = manager

    async def get(self, namespace: str, name: str) -> DeploymentReplicas | None:
        obj = await _unless_gone(
            asyncio.to_thread(
                self._apps.read_namespaced_deployment, name, namespace, _request_timeout=10
            )
        )
        if obj is None:
            return None
        controllers = [o.uid for o in obj.metadata.owner_references or [] if o.controller]
        return DeploymentReplicas(
            replicas=obj.spec.replicas or 0,
            ready_replicas=(obj.status.ready_replicas if obj.status else None) or 0,
            controller_uid=controllers[0] if controllers else None,
        )

    async def apply(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        """Create the Deployment or update the fields in `body` (server-side apply, forced:
        these fields are ours to decide)."""
        # The generated client cannot send application/apply-patch: call the endpoint.
        await asyncio.to_thread(
            self._client.call_api,
            "/apis/apps/v1/namespaces/{namespace}/deployments/{name}", "PATCH",
            {"namespace": namespace, "name": name},
            [("fieldManager", self._manager), ("force", "true")],
            {"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
            body=body, response_type="object", auth_settings=["BearerToken"],
            _return_http_data_only=True, _request_timeout=10,
        )  # fmt: skip

    async def scale(self, namespace: str, name: str, replicas: int) -> bool:
        """Set `spec.replicas` through the scale subresource; False when the Deployment is gone."""
        scaled = await _unless_gone(
            asyncio.to_thread(
                self._apps.patch_namespaced_deployment_scale,
                name,
                namespace,
                {"spec": {"replicas": replicas}},
                field_manager=self._manager,
                _request_timeout=10,
            )
        )
        return scaled is not None

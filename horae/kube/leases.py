"""Lease objects (coordination.k8s.io/v1): read raw, written with optimistic concurrency.

A write names the resourceVersion it saw; 409 (someone wrote first) becomes
`LeaseConflict`, and so does 404 on a replace (someone deleted it first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from horae.errors import LeaseConflict
from horae.kube.calling import call, timestamp


@dataclass(frozen=True)
class Lease:
    name: str
    holder: str | None
    resource_version: str
    labels: dict[str, str]
    acquired: str | None = None
    """spec.acquireTime as the API server wrote it (a renewal sends it back unchanged)."""


def lease_from_json(obj: dict[str, Any]) -> Lease:
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


class Leases:
    """Lease objects in one namespace, optimistic-concurrency writes only."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self._api = client.CoordinationV1Api(api)
        self.namespace = namespace

    async def list(self, selector: str) -> list[Lease]:
        result = await call(
            self._api.list_namespaced_lease, self.namespace, label_selector=selector, as_json=True
        )
        return [lease_from_json(item) for item in result["items"]]

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
                "acquireTime": timestamp(),
                "renewTime": timestamp(),
                "leaseTransitions": 0,
            },
        }
        try:
            obj = await call(self._api.create_namespaced_lease, self.namespace, body, as_json=True)
        except ApiException as exc:
            if exc.status == 409:
                raise LeaseConflict(name) from exc
            raise
        return lease_from_json(obj)

    async def write(
        self, lease: Lease, holder: str | None, duration_s: int, *, acquire: bool
    ) -> Lease:
        """Renew, take (acquire=True) or release (holder=None) a Lease seen at `lease`."""
        spec: dict[str, Any] = {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration_s,
            "renewTime": timestamp(),
        }
        if acquire:
            spec["acquireTime"] = timestamp()
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
            obj = await call(
                self._api.replace_namespaced_lease, lease.name, self.namespace, body, as_json=True
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                raise LeaseConflict(lease.name) from exc
            raise
        return lease_from_json(obj)

    async def delete(self, name: str, *, resource_version: str | None = None) -> None:
        """Delete the Lease `name` (gone already: nothing to do); with `resource_version`,
        only that version of it: `LeaseConflict` when it was written since."""
        options = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(resource_version=resource_version)
            if resource_version is not None
            else None
        )
        try:
            await call(
                self._api.delete_namespaced_lease,
                name,
                self.namespace,
                body=options,
                missing_ok=True,
            )
        except ApiException as exc:
            if exc.status == 409:
                raise LeaseConflict(name) from exc
            raise

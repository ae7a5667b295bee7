"""`Deployments`: the apps/v1 Deployments that run WorkerPools, by server-side apply."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes import client

from horae.kube.calling import call


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
        obj = await call(self._apps.read_namespaced_deployment, name, namespace, missing_ok=True)
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
        await call(
            self._client.call_api,
            "/apis/apps/v1/namespaces/{namespace}/deployments/{name}",
            "PATCH",
            {"namespace": namespace, "name": name},
            [("fieldManager", self._manager), ("force", "true")],
            {"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
            body=body,
            response_type="object",
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
        )

    async def scale(self, namespace: str, name: str, replicas: int) -> bool:
        """Set `spec.replicas` through the scale subresource; False when the Deployment is gone."""
        scaled = await call(
            self._apps.patch_namespaced_deployment_scale,
            name,
            namespace,
            {"spec": {"replicas": replicas}},
            field_manager=self._manager,
            missing_ok=True,
        )
        return scaled is not None

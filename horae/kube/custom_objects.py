"""`CustomObjects`: reads and writes of Horae's custom resources (group `horae.dev`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from horae.errors import ObjectChanged
from horae.kube.calling import CLUSTER_LIST_TIMEOUT, LIST_TIMEOUT, REQUEST_TIMEOUT, call
from horae.resources import GROUP, VERSION


class CustomObjects:
    """Reads and writes of Horae's custom resources."""

    def __init__(self, api: client.ApiClient) -> None:
        self._api = client.CustomObjectsApi(api)

    async def _call(
        self,
        method: Callable[..., Any],
        *args: Any,
        timeout: int = REQUEST_TIMEOUT,
        missing_ok: bool = False,
        **kwargs: Any,
    ) -> Any:
        """`method(GROUP, VERSION, *args, **kwargs)` through `call`."""
        return await call(
            method, GROUP, VERSION, *args, timeout=timeout, missing_ok=missing_ok, **kwargs
        )

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> bool:
        """Merge-patch `status`; False when the object is gone."""
        patched = await self._call(
            self._api.patch_namespaced_custom_object_status,
            namespace,
            plural,
            name,
            {"status": status},
            missing_ok=True,
        )
        return patched is not None

    async def patch_status_seen(
        self,
        plural: str,
        namespace: str,
        name: str,
        status: dict[str, Any],
        *,
        resource_version: str,
    ) -> dict[str, Any] | None:
        """Merge-patch `status` only if the object is still at `resource_version` (what its
        writer read: ObjectChanged otherwise); the object as patched, None when it is gone."""
        body = {"metadata": {"resourceVersion": resource_version}, "status": status}
        try:
            patched = await self._call(
                self._api.patch_namespaced_custom_object_status,
                namespace,
                plural,
                name,
                body,
                missing_ok=True,
            )
        except ApiException as exc:
            if exc.status == 409:
                raise ObjectChanged(f"{plural}/{name} in {namespace}") from exc
            raise
        return None if patched is None else dict(patched)

    async def patch(
        self, plural: str, namespace: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Merge-patch the object (not its status); the object as patched, None when gone."""
        patched = await self._call(
            self._api.patch_namespaced_custom_object, namespace, plural, name, body, missing_ok=True
        )
        return None if patched is None else dict(patched)

    async def list_all(self, plural: str) -> list[dict[str, Any]]:
        """Every object of `plural` in every namespace."""
        result = await self._call(
            self._api.list_cluster_custom_object, plural, timeout=CLUSTER_LIST_TIMEOUT
        )
        return list(result["items"])

    async def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        obj = await self._call(
            self._api.get_namespaced_custom_object, namespace, plural, name, missing_ok=True
        )
        return None if obj is None else dict(obj)

    async def list(
        self, plural: str, namespace: str, *, label_selector: str = ""
    ) -> list[dict[str, Any]]:
        result = await self._call(
            self._api.list_namespaced_custom_object,
            namespace,
            plural,
            label_selector=label_selector,
            timeout=LIST_TIMEOUT,
        )
        return list(result["items"])

    async def upsert(self, plural: str, namespace: str, name: str, body: dict[str, Any]) -> None:
        """Create the object, or merge-patch it when it exists."""
        try:
            await self._call(self._api.create_namespaced_custom_object, namespace, plural, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            await self._call(
                self._api.patch_namespaced_custom_object, namespace, plural, name, body
            )

    async def delete(self, plural: str, namespace: str, name: str) -> None:
        await self._call(
            self._api.delete_namespaced_custom_object, namespace, plural, name, missing_ok=True
        )

    async def delete_all(self, plural: str, namespace: str, *, label_selector: str) -> None:
        await self._call(
            self._api.delete_collection_namespaced_custom_object,
            namespace,
            plural,
            label_selector=label_selector,
            timeout=LIST_TIMEOUT,
        )

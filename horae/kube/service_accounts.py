"""`ServiceAccounts`: reads of ServiceAccounts (whether a WorkerPool may run as one)."""

from __future__ import annotations

from kubernetes import client

from horae.kube.calling import call


class ServiceAccounts:
    """Reads of ServiceAccounts (whether a WorkerPool may run its pods as one)."""

    def __init__(self, api: client.ApiClient) -> None:
        self._core = client.CoreV1Api(api)

    async def labels(self, namespace: str, name: str) -> dict[str, str] | None:
        """The ServiceAccount's labels; None when it does not exist."""
        obj = await call(
            self._core.read_namespaced_service_account, name, namespace, missing_ok=True
        )
        return None if obj is None else dict(obj.metadata.labels or {})

"""`Events`: Kubernetes Events on Horae's resources (what `kubectl describe` shows)."""

from __future__ import annotations

from kubernetes import client

from horae.kube.calling import call, timestamp
from horae.resources import GROUP, VERSION


class Events:
    """Kubernetes Events on Horae's resources (what `kubectl describe` shows)."""

    def __init__(self, api: client.ApiClient, component: str = "horae-operator") -> None:
        self._core = client.CoreV1Api(api)
        self._component = component

    async def emit(
        self,
        *,
        kind: str,
        namespace: str,
        name: str,
        uid: str,
        reason: str,
        message: str,
        warning: bool = True,
    ) -> None:
        now = timestamp()
        involved = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": kind,
            "namespace": namespace,
            "name": name,
            "uid": uid,
        }
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": self._component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        await call(self._core.create_namespaced_event, namespace, body)

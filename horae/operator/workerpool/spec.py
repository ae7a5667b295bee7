"""The WorkerPool as the operator reads it: its spec, and the pool it describes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from horae.resources import GROUP

POOL_LABEL = f"{GROUP}/workerpool"
"""The label of a pool's Deployment and pods: its name."""


class WorkerPoolSpec(BaseModel):
    """`spec` of a WorkerPool; the defaults are the CRD schema's."""

    model_config = ConfigDict(
        frozen=True, extra="ignore", alias_generator=to_camel, populate_by_name=True
    )

    image: str
    tasks: str
    replicas: int | None = Field(default=None, ge=0)
    """None until the operator fills it in (`handlers`)."""
    autoscaling: Literal["Builtin", "External"] = "Builtin"
    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=10, ge=1)
    target_backlog_per_replica: int = Field(default=100, ge=1)
    concurrency: int | None = Field(default=None, ge=1)
    resources: dict[str, Any] | None = None
    env: list[dict[str, Any]] = Field(default_factory=list)
    service_account_name: str | None = None
    automount_service_account_token: bool = False
    tenants: list[str] | None = None
    pod_annotations: dict[str, str] = Field(default_factory=dict)
    priority_class_name: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    topology_spread_constraints: list[dict[str, Any]] = Field(default_factory=list)


@dataclass(frozen=True)
class Pool:
    namespace: str
    name: str
    uid: str
    spec: WorkerPoolSpec
    tenants: tuple[str, ...] = ()
    """The tenants its workers serve (`tenancy.served_tenants`); empty: its own namespace."""

    @property
    def builtin(self) -> bool:
        """The operator's autoscaler sets spec.replicas (autoscaling Builtin)."""
        return self.spec.autoscaling == "Builtin"

    @property
    def selector(self) -> str:
        """The label selector of its pods, as the scale subresource reports it."""
        return f"{POOL_LABEL}={self.name}"

    def with_replicas(self, replicas: int) -> Pool:
        """The pool once its spec.replicas is `replicas`."""
        spec = self.spec.model_copy(update={"replicas": replicas})
        return Pool(self.namespace, self.name, self.uid, spec, self.tenants)

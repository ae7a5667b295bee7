"""What the routes depend on, as FastAPI dependencies: the application's `Services` (the
store's groups, the authenticator, the group commit of single creates) and `Access`, which
answers the caller's tenant once it may act there.

No `from __future__ import annotations` here: FastAPI reads these signatures at runtime.
"""

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Header, Request

from horae.api.auth import CLUSTER, Authenticator, Caller
from horae.api.gate import CALLER_KEY, unauthorized
from horae.api.problems import Problem, invalid
from horae.batching import GroupCommit
from horae.clock import utc_now
from horae.errors import ShardMoved
from horae.store import routing
from horae.store.groups import Store
from horae.store.new_jobs import NewJob


@dataclass
class Services:
    """What every route may use; `groups` is set once the application has connected (its
    lifespan)."""

    auth: Authenticator
    groups: Store | None = None
    """Every store group's pool and the catalog that routes a job to one."""
    _creates: dict[str, GroupCommit[NewJob, uuid.UUID]] = field(default_factory=dict, init=False)
    """Concurrent single creates, committed together per store group (one transaction of
    that group each); each caller is answered only after the COMMIT that holds its job. A
    flush that fails, for any reason, is tried again job by job (`isolate`), so one tenant's
    bad job cannot fail another's."""

    def store(self) -> Store:
        if self.groups is None:
            raise Problem(503, "Unavailable", "not connected to the database yet")
        return self.groups

    async def create(self, new: NewJob) -> uuid.UUID:
        """Create one job with whatever other single creates of its group are pending; once
        more in its shard's new group when the shard moved meanwhile."""
        store = self.store()
        for retried in (False, True):
            group = store.catalog.group_of(store.shard_of(new.job_id))
            try:
                return await self._group_commit(group).submit(new)
            except ShardMoved:
                if retried or not await store.moved():
                    raise
        raise AssertionError("unreachable")

    def _group_commit(self, group: str) -> GroupCommit[NewJob, uuid.UUID]:
        if group not in self._creates:

            async def flush(new: Sequence[NewJob]) -> list[uuid.UUID]:
                await routing.create_in(self.store(), group, new, now=utc_now())
                return [job.job_id for job in new]

            self._creates[group] = GroupCommit(flush, max_batch=500, isolate=True)
        return self._creates[group]


def services(request: Request) -> Services:
    found: Services = request.app.state.services
    return found


def store(request: Request) -> Store:
    return services(request).store()


ServicesDep = Annotated[Services, Depends(services)]
StoreDep = Annotated[Store, Depends(store)]


class Access:
    """A dependency answering the caller's tenant once it may `verb` `resource` there;
    `cluster`: a permission bound cluster-wide (ClusterRoleBinding), not in the tenant's
    namespace, for what a tenant must not decide about itself."""

    def __init__(self, verb: str, resource: str = "jobs", *, cluster: bool = False) -> None:
        self.verb = verb
        self.resource = resource
        self.cluster = cluster

    async def __call__(
        self,
        request: Request,
        horae_tenant: Annotated[
            str | None,
            Header(description="Tenant (namespace) to act in; default: the caller's own."),
        ] = None,
    ) -> str:
        return await self.check(request, horae_tenant)

    async def check(self, request: Request, named: str | None) -> str:
        # The Gate authenticated the token before the body was read; a route the Gate
        # lets through unauthenticated (a public path) is refused rather than reviewed.
        caller: Caller | None = request.scope.get(CALLER_KEY)
        if caller is None:
            raise unauthorized("a bearer token is required")
        tenant = named or caller.default_tenant
        if not tenant:
            raise invalid("Horae-Tenant", "header required: this caller has no default tenant")
        if len(tenant) > 253:
            raise invalid("Horae-Tenant", "at most 253 characters")
        where = CLUSTER if self.cluster else tenant
        if not await services(request).auth.allowed(caller, self.verb, self.resource, where):
            scope = "cluster-wide" if self.cluster else "in tenant"
            raise Problem(
                403,
                "Forbidden",
                f"{caller.name} may not {self.verb} {self.resource} {scope} {tenant}",
            )
        return tenant


# The caller's tenant, once it may act on jobs there (each route names the verb it needs).
MayCreate = Annotated[str, Depends(Access("create"))]
MayList = Annotated[str, Depends(Access("list"))]
MayGet = Annotated[str, Depends(Access("get"))]
MayUpdate = Annotated[str, Depends(Access("update"))]
MayDelete = Annotated[str, Depends(Access("delete"))]

"""/tenants: an administrator's settings of a tenant (its running limit and quotas)."""

from fastapi import APIRouter, Request

from horae.api.deps import Access, StoreDep
from horae.api.routes.common import ERRORS
from horae.api.schemas import TenantLimit, TenantOut
from horae.store import tenants

router = APIRouter()

SET_TENANTS = Access("update", "tenants", cluster=True)


@router.put("/tenants/{name}", response_model=TenantOut, responses=ERRORS)
async def set_tenant(name: str, body: TenantLimit, request: Request, store: StoreDep) -> TenantOut:
    """Replace a tenant's settings: its limit of concurrently running executions (null:
    no limit) and its quotas (left out or null: the defaults). An administrator's
    setting: needs `update` on `tenants` in group horae.dev granted cluster-wide (a
    ClusterRoleBinding), never rights inside the tenant's namespace. Settings live in the
    first store group; what the tenant uses is summed over every group."""
    tenant = await SET_TENANTS.check(request, name)
    async with store.home.acquire() as conn:
        await tenants.set_tenant_limit(
            conn,
            tenant,
            body.max_running,
            max_jobs=body.max_jobs,
            max_fires_per_minute=body.max_fires_per_minute,
        )
    [row] = await tenants.in_every_group(store, tenant)
    return TenantOut.model_validate(row, from_attributes=True)

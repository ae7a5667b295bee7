"""The job API's endpoints (DESIGN §10), one module per resource. Every write is one store
transaction and the response is sent only after COMMIT. What the routes depend on (the
store, the caller's tenant) is in `horae.api.deps`.

No `from __future__ import annotations` in these modules: FastAPI reads the route
signatures at runtime.
"""

from fastapi import APIRouter

from horae.api.routes import actions, executions, explain, jobs, schedules, tenants


def build_router() -> APIRouter:
    router = APIRouter()
    for part in (jobs, actions, explain, executions, schedules, tenants):
        router.include_router(part.router)
    return router

"""A ScheduledJob its tenant's quota has no room for is reported `Ready=False` with reason
`QuotaExceeded` (and a Warning event), and is stored once an administrator raises it."""

from __future__ import annotations

from typing import Any

from horae.store import tenants
from tests.e2e.test_operator import job_manifest, stored_state
from tests.support.kube import ControlPlane
from tests.support.processes import Processes
from tests.support.store_rows import StoreRows
from tests.support.wait import until


async def test_a_scheduledjob_over_its_tenants_quota_is_not_ready_until_the_quota_is_raised(
    control_plane: ControlPlane, namespace: str, processes: Processes, stored: StoreRows
) -> None:
    async with stored.main.acquire() as conn:
        await tenants.set_tenant_limit(conn, namespace, None, max_jobs=1)
    processes.start("operator", "operator")
    control_plane.kubectl("apply", "-f", "-", input=job_manifest(namespace, "first"))

    async def first_stored() -> bool:
        return await stored_state(stored, namespace, "first") == "active"

    await until(first_stored, timeout=30, what="the first ScheduledJob stored")
    control_plane.kubectl("apply", "-f", "-", input=job_manifest(namespace, "second"))

    def ready() -> dict[str, Any] | None:
        status = control_plane.get_json("sj", "second", "-n", namespace).get("status", {})
        return {c["type"]: c for c in status.get("conditions", [])}.get("Ready")

    async def refused() -> dict[str, Any] | None:
        condition = ready()
        return condition if condition and condition["status"] == "False" else None

    condition = await until(refused, timeout=30, what="Ready=False")
    assert condition["reason"] == "QuotaExceeded"
    assert f"tenant {namespace} is at its quota max_jobs=1" in condition["message"]
    assert await stored_state(stored, namespace, "second") is None

    async def warned() -> bool:
        events = control_plane.get_json(
            "events", "-n", namespace, "--field-selector", "involvedObject.name=second"
        )["items"]
        return any((e["type"], e["reason"]) == ("Warning", "QuotaExceeded") for e in events)

    await until(warned, timeout=20, what="a Warning event QuotaExceeded")

    async with stored.main.acquire() as conn:
        await tenants.set_tenant_limit(conn, namespace, None, max_jobs=2)

    async def stored_and_ready() -> bool:
        condition = ready()
        active = await stored_state(stored, namespace, "second") == "active"
        return active and condition is not None and condition["status"] == "True"

    await until(stored_and_ready, timeout=60, interval=1, what="stored once the quota allows")

"""The operator's resync pass against the real kube-apiserver and PostgreSQL: one bad
ScheduledJob never stops the pass for the others."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from horae.kube import CustomObjects, load_api_client
from horae.operator.executions import ExecutionMirrors
from horae.operator.resync import Resync
from horae.store.groups import Store
from tests.support.kube import ControlPlane
from tests.support.processes import REPO
from tests.support.store_rows import StoreRows

CRD = REPO / "crds" / "scheduledjobs.yaml"


def _apply(plane: ControlPlane, namespace: str, name: str, spec: dict[str, object]) -> str:
    body = {
        "apiVersion": "horae.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    plane.kubectl("apply", "-f", "-", input=json.dumps(body))
    return str(plane.get_json("scheduledjob", name, "-n", namespace)["metadata"]["uid"])


def _without_instant_rules(plane: ControlPlane) -> str:
    """The installed CRD without its runAt bounds: what a cluster held before them."""
    crd = plane.get_json("crd", "scheduledjobs.horae.dev")
    for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
        crd["metadata"].pop(key, None)
    crd.pop("status", None)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"]["properties"]["runAt"].pop("x-kubernetes-validations", None)
    return json.dumps(crd)


async def test_one_scheduledjob_that_cannot_be_stored_does_not_stop_the_pass(
    control_plane: ControlPlane,
    namespace: str,
    db_url: str,
    stored: StoreRows,
    component_kubeconfigs: dict[str, Path],
) -> None:
    # A runAt near year 9999 (stored before the CRD bounded it) raised OverflowError out
    # of the pass: no other resource missing from the store was stored again, cluster-wide.
    control_plane.kubectl("replace", "-f", "-", input=_without_instant_rules(control_plane))
    try:
        bad = _apply(
            control_plane,
            namespace,
            "far",
            {
                "task": "t",
                "runAt": "9999-12-31T23:59:59Z",
                "jitterSeconds": 3600,
            },
        )
    finally:
        control_plane.kubectl("replace", "-f", str(CRD))
    soon = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    good = [
        _apply(control_plane, namespace, f"good-{i}", {"task": "t", "runAt": soon})
        for i in range(4)
    ]

    objects = CustomObjects(load_api_client(str(component_kubeconfigs["operator"])))
    store = await Store.open(db_url, size=2)
    try:
        resync = Resync(store, objects, ExecutionMirrors(store, objects), period=60)
        kept, cancelled = await resync.once()
    finally:
        await store.close()

    assert (kept, cancelled) == (4, 0)
    rows = await stored.fetch("SELECT id FROM jobs WHERE tenant = $1", namespace)
    assert {r["id"] for r in rows} == {uuid.UUID(uid) for uid in good}
    assert uuid.UUID(bad) not in {r["id"] for r in rows}
    status = control_plane.get_json("scheduledjob", "good-0", "-n", namespace).get("status", {})
    assert status.get("jobId") == good[0]

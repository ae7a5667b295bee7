"""The Backfill resource through kubectl: applied, its status follows the store's backfill
to Completed; `spec.cancel: true` or a delete cancels one; bad manifests are refused at
`kubectl apply` (schema and CEL) or by the operator (phase Failed, naming the field)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from tests.support.kube import ControlPlane
from tests.support.processes import Processes
from tests.support.store_rows import StoreRows
from tests.support.wait import until


def backfill(name: str, **spec: Any) -> str:
    return yaml.safe_dump({"apiVersion": "horae.dev/v1alpha1", "kind": "Backfill",
                           "metadata": {"name": name}, "spec": spec})  # fmt: skip


def hours_back(hours: int, until: int = 0) -> dict[str, str]:
    """From `hours` to `until` hours before the last top of the hour."""
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    return {
        "from": (end - timedelta(hours=hours)).isoformat(),
        "to": (end - timedelta(hours=until)).isoformat(),
    }


async def test_a_backfill_resource_completes_is_cancelled_and_refuses_bad_specs(
    control_plane: ControlPlane, namespace: str, processes: Processes, stored: StoreRows
) -> None:
    kubectl, ns = control_plane.kubectl, namespace

    def apply(text: str, check: bool = True) -> Any:
        return kubectl("apply", "-n", ns, "-f", "-", input=text, check=check)

    def status(name: str) -> dict[str, Any]:
        return dict(control_plane.get_json("backfill", name, "-n", ns).get("status") or {})

    # Refused at apply: the range backwards, a rate out of bounds, an unknown overlap.
    refused = [
        ({"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"},
         "spec.from must be before spec.to"),
        ({**hours_back(2), "rate": 0}, "spec.rate"),
        ({**hours_back(2), "overlap": "Replace"}, "spec.overlap"),
        ({**hours_back(2), "from": "last tuesday"}, "spec.from"),
    ]  # fmt: skip
    for spec, message in refused:
        r = apply(backfill("bad", scheduledJob="hourly", **spec), check=False)
        assert r.returncode != 0 and message in r.stderr, (spec, r.stderr)

    processes.start("operator", "operator")
    processes.start("scheduler", "scheduler")
    processes.start("worker", "worker", "--tasks", "tests/e2e/tasks.py",
                    env={"HORAE_TENANTS": ns})  # fmt: skip
    kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump({
        "apiVersion": "horae.dev/v1alpha1", "kind": "ScheduledJob", "metadata": {"name": "hourly"},
        "spec": {"task": "e2e.echo", "schedule": "0 * * * *"}}))  # fmt: skip
    apply(backfill("two-days", scheduledJob="hourly", rate=100, **hours_back(48)))
    # Other ranges: an occurrence that ran (by the first) is not backfilled again.
    apply(backfill("slow", scheduledJob="hourly", rate=2, **hours_back(96, 48)))
    apply(backfill("deleted", scheduledJob="hourly", rate=2, **hours_back(144, 96)))
    future = {"from": hours_back(1)["from"],
              "to": (datetime.now(UTC) + timedelta(days=1)).isoformat()}  # fmt: skip
    apply(backfill("future", scheduledJob="hourly", **future))

    async def completed() -> dict[str, Any] | None:
        s = status("two-days")
        return s if s.get("phase") == "Completed" else None

    done = await until(completed, timeout=40, what="Backfill two-days Completed")
    assert (done["total"], done["created"], done["succeeded"], done["progress"]) == (
        48,
        48,
        48,
        "48/48",
    )
    shown = kubectl("get", "backfills", "two-days", "-n", ns).stdout
    header, row = shown.splitlines()
    assert header.split() == ["NAME", "JOB", "FROM", "TO", "PROGRESS", "PHASE", "AGE"]
    assert row.split()[:2] == ["two-days", "hourly"] and row.split()[4:6] == ["48/48", "Completed"]

    # Immutable but for cancel; cancel sticks.
    r = kubectl("patch", "backfill", "slow", "-n", ns, "--type=merge", "-p",
                '{"spec": {"rate": 50}}', check=False)  # fmt: skip
    assert r.returncode != 0 and "spec is immutable but for spec.cancel" in r.stderr, r.stderr

    async def started(name: str) -> bool:
        s = status(name)
        return s.get("phase") == "Running" and s.get("created", 0) >= 1

    await until(lambda: started("slow"), timeout=20, what="Backfill slow running")
    kubectl("patch", "backfill", "slow", "-n", ns, "--type=merge", "-p",
            '{"spec": {"cancel": true}}')  # fmt: skip

    async def cancelled() -> dict[str, Any] | None:
        s = status("slow")
        return s if s.get("phase") == "Cancelled" else None

    gone = await until(cancelled, timeout=15, what="Backfill slow Cancelled")
    assert gone["created"] < 48
    backfill_id = gone["backfillId"]
    rows = await stored.fetch(
        "SELECT status::text, error_message FROM executions WHERE backfill = $1", backfill_id
    )
    assert len(rows) == gone["created"] and not [r for r in rows if r["status"] == "scheduled"]
    r = kubectl("patch", "backfill", "slow", "-n", ns, "--type=merge", "-p",
                '{"spec": {"cancel": false}}', check=False)  # fmt: skip
    assert r.returncode != 0 and "spec.cancel cannot be undone" in r.stderr, r.stderr

    # A delete cancels the store's backfill.
    await until(lambda: started("deleted"), timeout=20, what="Backfill deleted running")
    deleted_id = status("deleted")["backfillId"]
    kubectl("delete", "backfill", "deleted", "-n", ns, "--wait=true", "--timeout=20s")
    state = await stored.fetchrow(
        "SELECT state::text, message FROM backfills WHERE id = $1", deleted_id
    )
    assert (state["state"], state["message"]) == ("cancelled", "Backfill deleted")

    # The operator refuses a range reaching into the future, saying so.
    async def failed() -> dict[str, Any] | None:
        s = status("future")
        return s if s.get("phase") == "Failed" else None

    refused_status = await until(failed, timeout=15, what="Backfill future Failed")
    [ready] = [c for c in refused_status["conditions"] if c["type"] == "Ready"]
    assert ready["status"] == "False" and ready["reason"] == "InvalidSpec"
    assert ready["message"].startswith("spec.to: ") and "in the future" in ready["message"]
    events = json.loads(kubectl("get", "events", "-n", ns, "-o", "json").stdout)["items"]
    assert any(e["reason"] == "InvalidSpec" and e["involvedObject"]["name"] == "future"
               for e in events)  # fmt: skip

    # Leave no Backfill for later tests' operators (their finalizers need this one's).
    kubectl("delete", "backfills", "--all", "-n", ns, "--wait=true", "--timeout=20s")

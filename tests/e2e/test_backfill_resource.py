"""The Backfill resource through kubectl: applied, its status follows the store's backfill
to Completed; `spec.cancel: true` or a delete cancels one (within seconds, even while its
status copy is mid-write); bad manifests are refused at `kubectl apply` (schema and CEL) or
by the operator (phase Failed, naming the field)."""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tests.support.certs import serving_cert
from tests.support.kube import ControlPlane, free_port
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


@contextmanager
def status_writes_held(
    plane: ControlPlane, namespace: str, seconds: float, directory: Path
) -> Iterator[threading.Event]:
    """A validating admission webhook that holds the first write of a Backfill's status in
    `namespace` for `seconds` before allowing it (and allows the others at once); the event
    is set when it is held."""
    cert = serving_cert(directory, service="held", namespace=namespace)
    held = threading.Event()

    class Webhook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if not held.is_set():
                held.set()
                time.sleep(seconds)
            body = json.dumps(
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": {"uid": review["request"]["uid"], "allowed": True},
                }
            )
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *_: Any) -> None:
            pass

    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), Webhook)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert.cert_file, cert.key_file)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    name = f"hold-backfill-status-{namespace}"
    plane.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "hold.backfills.test.horae.dev",
            "clientConfig": {"url": f"https://127.0.0.1:{port}/",
                             "caBundle": base64.b64encode(cert.ca_pem.encode()).decode()},
            "rules": [{"apiGroups": ["horae.dev"], "apiVersions": ["v1alpha1"],
                       "operations": ["UPDATE"], "resources": ["backfills/status"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "failurePolicy": "Ignore", "sideEffects": "None", "timeoutSeconds": 30,
            "admissionReviewVersions": ["v1"],
        }],
    }))  # fmt: skip
    try:
        yield held
    finally:
        plane.kubectl("delete", "validatingwebhookconfiguration", name, check=False)
        server.shutdown()


async def test_a_backfill_deleted_while_its_status_write_is_held_goes_within_seconds(
    control_plane: ControlPlane, namespace: str, processes: Processes, tmp_path: Path
) -> None:
    """kopf asks a deleted resource's timer to stop, and looks again whether it has only
    every `cancellation_polling` seconds (60 by kopf's default): a Backfill deleted while
    its status copy was mid-write kept its finalizer for a minute."""
    kubectl, ns = control_plane.kubectl, namespace
    processes.start("operator", "operator")
    kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump({
        "apiVersion": "horae.dev/v1alpha1", "kind": "ScheduledJob", "metadata": {"name": "hourly"},
        "spec": {"task": "e2e.echo", "schedule": "0 * * * *"}}))  # fmt: skip
    kubectl("apply", "-n", ns, "-f", "-",
            input=backfill("held", scheduledJob="hourly", rate=1, **hours_back(48)))  # fmt: skip

    async def running() -> bool:
        status = control_plane.get_json("backfill", "held", "-n", ns).get("status") or {}
        return bool(status.get("phase") == "Running")

    await until(running, timeout=30, what="Backfill held Running")
    with status_writes_held(control_plane, ns, 5, tmp_path / "webhook") as held:
        # The status copy (every second while Running) is held in its write.
        async def holding() -> bool:
            return held.is_set()

        await until(holding, timeout=20, what="a status write held")
        sent = time.monotonic()
        kubectl("delete", "backfill", "held", "-n", ns, "--wait=true", "--timeout=90s")
        took = time.monotonic() - sent
    assert took < 12, f"the delete took {took:.1f}s (the write was held 5 s)"

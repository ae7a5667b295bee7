"""No secret and no payload reaches a log: bearer tokens, connection credentials and job
payloads stay out of every component's output, on success and on bad input alike."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import httpx

from tests.support.kube import ControlPlane, free_port, jobs_editor_token
from tests.support.processes import Processes
from tests.support.store_rows import StoreRows
from tests.support.wait import until, until_serving


async def test_tokens_credentials_and_payloads_never_reach_the_logs(
    control_plane: ControlPlane, namespace: str, processes: Processes, stored: StoreRows,
    db_url: str, broker_url: str,
) -> None:  # fmt: skip
    marker = f"card-{uuid.uuid4().hex}"
    token = jobs_editor_token(control_plane, namespace)
    port = free_port()
    debug = {"HORAE_LOG_LEVEL": "DEBUG"}  # the most talkative they get
    processes.start("api", "api", "--port", str(port), env=debug)
    processes.start("scheduler", "scheduler", env=debug)
    processes.start("worker", "worker", "--tasks", "tests/e2e/tasks.py", env=debug)
    processes.start("operator", "operator", env=debug)
    control_plane.kubectl("apply", "-f", "-", input=f"""
apiVersion: horae.dev/v1alpha1
kind: ScheduledJob
metadata: {{name: secretive, namespace: {namespace}}}
spec: {{task: e2e.broken, schedule: "* * * * * *", payload: {{card: {marker}}}}}
""")  # fmt: skip
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        await until_serving(http)
        run_at = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
        created = await http.post("/jobs", headers=headers, json={
            "task": "e2e.echo", "run_at": run_at, "payload": {"card": marker}})  # fmt: skip
        assert created.status_code == 201, created.text
        bad = await http.post("/jobs", headers=headers, json={
            "task": "e2e.echo", "cron": "61 * * * *", "payload": {"card": marker}})  # fmt: skip
        assert bad.status_code == 422
        refused = await http.post(
            "/jobs", headers={"Authorization": f"Bearer {token}x"},
            json={"task": "e2e.echo", "payload": {"card": marker}},
        )  # fmt: skip
        assert refused.status_code == 401

    async def ran() -> bool:
        done = await stored.count(
            "SELECT count(*) FROM executions WHERE status IN ('succeeded', 'failed')"
        )
        return int(done) >= 3  # the API job, and the ScheduledJob failing twice

    await until(ran, timeout=30, what="both jobs run")
    processes.stop_all()
    secrets = {
        "payload": marker, "bearer token": token, "token's signature": token.split(".")[-1],
        "database password": f":{db_url.split(':')[2].split('@')[0]}@",
        "broker password": f":{broker_url.split(':')[2].split('@')[0]}@",
    }  # fmt: skip
    for component in processes.started:
        text = component.log()
        assert text, f"{component.identity} logged nothing: the test would prove nothing"
        leaked = [name for name, value in secrets.items() if value in text]
        assert leaked == [], f"{component.identity} logged {leaked}"

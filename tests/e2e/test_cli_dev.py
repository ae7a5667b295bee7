"""`horae dev` brings every component up in one command: a job made with `horae jobs
create` runs to `succeeded`, and SIGTERM stops the lot with exit code 0."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from tests.support.invocations import invocations
from tests.support.kube import ControlPlane, free_port
from tests.support.processes import HORAE, REPO, Processes
from tests.support.wait import until


def cli(env: dict[str, str], *args: str) -> Any:
    r = subprocess.run([HORAE, *args, "-o", "json"], capture_output=True, text=True, env=env,
                       cwd=REPO, timeout=60, check=False)  # fmt: skip
    assert r.returncode == 0, (args, r.stderr)
    return json.loads(r.stdout)


def holders(plane: ControlPlane, namespace: str) -> dict[str, str]:
    """Lease name -> holder identity, for the Leases someone holds."""
    leases = plane.get_json("leases", "-n", namespace)["items"]
    return {x["metadata"]["name"]: x["spec"]["holderIdentity"]
            for x in leases if x["spec"].get("holderIdentity")}  # fmt: skip


def api_healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


async def test_horae_dev_runs_a_job_created_from_the_cli_and_stops_on_sigterm(
    control_plane: ControlPlane, namespace: str, processes: Processes,
    horae_env: dict[str, str], tmp_path: Path,
) -> None:  # fmt: skip
    port, log = free_port(), tmp_path / "calls.jsonl"
    dev = processes.start("dev", "dev", "--tasks", "tests/e2e/tasks.py", "--port", str(port),
                          env={"HORAE_TEST_LOG": str(log)})  # fmt: skip

    async def everything_up() -> bool:
        held = holders(control_plane, namespace)
        shards = [n for n, h in held.items() if n.startswith("horae-shard-")]
        return (
            len(shards) == 64
            and {held[n] for n in shards} == {f"{dev.identity}-scheduler"}
            and held.get("horae-operator") == f"{dev.identity}-operator"
            and api_healthy(port)
        )

    await until(everything_up, timeout=60, interval=0.5,
                what="shards, operator Lease and API of horae dev")  # fmt: skip
    assert dev.alive()

    run_at = datetime.now(UTC) + timedelta(seconds=3)
    job = cli(horae_env, "jobs", "create", "--task", "e2e.echo", "--run-at", run_at.isoformat(),
              "--tenant", namespace, "--payload", '{"greeting": "hello"}')  # fmt: skip

    async def succeeded() -> list[dict[str, Any]]:
        runs = cli(horae_env, "executions", job["id"])
        return runs if runs and runs[0]["status"] == "succeeded" else []

    [execution] = await until(succeeded, timeout=40, interval=0.5, what="a succeeded execution")
    assert execution["attempt"] == 1
    assert [c["job_id"] for c in invocations(log)] == [job["id"]]

    assert dev.stop(timeout=60) == 0
    assert not api_healthy(port)
    assert holders(control_plane, namespace) == {}  # every component let go of its Leases

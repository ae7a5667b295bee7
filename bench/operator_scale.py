"""Operator at scale: N ScheduledJobs applied at once (one `kubectl apply`); prints how long
until every one is Ready (stored, status written) and the operator's peak memory (VmHWM).

    .venv/bin/python -m bench.operator_scale [--count 500]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

from bench.harness import REPO, horae_system


def manifests(count: int) -> str:
    docs = []
    for i in range(count):
        spec = {"task": "bench.noop", "schedule": f"{i % 60} {i % 24} * * *",
                "timeZone": "Europe/Paris", "payload": {"n": i}}  # fmt: skip
        docs.append(json.dumps({
            "apiVersion": "horae.dev/v1alpha1", "kind": "ScheduledJob",
            "metadata": {"name": f"job-{i:04d}", "namespace": "default"}, "spec": spec,
        }))  # fmt: skip
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [json.loads(d) for d in docs]})


def kubectl(env: dict[str, str], *args: str, input: str | None = None) -> str:
    return subprocess.run(["kubectl", *args], env=env, input=input, capture_output=True,
                          text=True, check=True, timeout=300).stdout  # fmt: skip


def install_crds(env: dict[str, str]) -> None:
    """Apply Horae's CRDs and wait until the API server serves them."""
    kubectl(env, "apply", "-f", str(REPO / "crds"))
    for crd in ("scheduledjobs", "executions", "workerpools"):
        kubectl(env, "wait", "--for=condition=Established", f"crd/{crd}.horae.dev")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=500)
    args = parser.parse_args()
    async with horae_system("opscale") as system:
        env = system.env
        install_crds(env)
        system.start("opscale-operator", "operator")
        operator = system.processes[-1]
        await asyncio.sleep(3)  # the operator up and watching
        print(f"operator_scale: {args.count} ScheduledJobs in one apply; {os.cpu_count()} cores")
        started = time.monotonic()
        kubectl(env, "apply", "-f", "-", input=manifests(args.count))
        applied = time.monotonic() - started
        ready = 0
        while time.monotonic() - started < 600:
            items = json.loads(kubectl(env, "get", "sj", "-n", "default", "-o", "json"))["items"]
            ready = sum(
                1 for i in items
                if any(c["type"] == "Ready" and c["status"] == "True"
                       for c in i.get("status", {}).get("conditions", []))
            )  # fmt: skip
            if ready == args.count:
                break
            await asyncio.sleep(0.5)
        took = time.monotonic() - started
        print(f"kubectl apply returned after {applied:.1f}s; {ready}/{args.count} Ready after "
              f"{took:.1f}s ({args.count / took:.0f} jobs/s)")  # fmt: skip
        print(f"operator peak memory (VmHWM): {peak_rss_mib(operator.pid):.0f} MiB")


if __name__ == "__main__":
    asyncio.run(main())

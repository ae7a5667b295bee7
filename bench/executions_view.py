"""`kubectl get executions` under load: --jobs ScheduledJobs every 2 s (100: 50 executions a
second), first with the operator's Execution CRD mirror (written into etcd), then through
the aggregated API (read from the store). For each, over --seconds after a warm-up:

- how long after an execution ended in the store a `kubectl get executions --watch` saw it
  end (p50, p95, max), and how many of those that ended it never saw;
- kube-apiserver's and etcd's CPU (seconds per second, from /proc);
- writes to executions per second at the API server (apiserver_request_total).

    .venv/bin/python -m bench.executions_view [--jobs 100] [--seconds 90]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from bench.harness import REPO, System, horae_system, pct
from tests.support.aggregated import APISERVICE, SERVICE, availability, registration
from tests.support.certs import serving_cert
from tests.support.chart import INSTALL_NAMESPACE
from tests.support.kube import free_port

TICKS = os.sysconf("SC_CLK_TCK")
WARM_UP = 15.0
MUTATING = ("POST", "PUT", "PATCH", "DELETE")


def kubectl(env: dict[str, str], *args: str, input: str | None = None, check: bool = True) -> str:
    return subprocess.run(["kubectl", *args], env=env, input=input, capture_output=True,
                          text=True, check=check, timeout=300).stdout  # fmt: skip


def manifests(namespace: str, count: int) -> str:
    items = [
        {"apiVersion": "horae.dev/v1alpha1", "kind": "ScheduledJob",
         "metadata": {"name": f"job-{i:03d}", "namespace": namespace},
         "spec": {"task": "bench.noop", "schedule": "*/2 * * * * *"}}
        for i in range(count)
    ]  # fmt: skip
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def plane_pids(env: dict[str, str]) -> dict[str, int]:
    plane = Path(env["KUBECONFIG"]).parent
    return {name: int((plane / f"{name}.pid").read_text()) for name in ("kube-apiserver", "etcd")}


def requests_by_kind(env: dict[str, str]) -> dict[str, float]:
    """Requests the API server has counted, by `VERB resource[/subresource]`."""
    found: dict[str, float] = {}
    for line in kubectl(env, "get", "--raw", "/metrics").splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        sub = f"/{labels['subresource']}" if labels.get("subresource") else ""
        key = f"{labels.get('verb', '')} {labels.get('resource', '')}{sub}"
        found[key] = found.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return found


@contextmanager
def watching(env: dict[str, str], namespace: str, resource: str) -> Iterator[dict[str, float]]:
    """Each execution id the watch showed ended, with when it first did."""
    ended: dict[str, float] = {}
    columns = "custom-columns=ID:.status.executionId,PHASE:.status.phase,STATUS:.status.status"
    watch = subprocess.Popen(
        ["kubectl", "get", resource, "-n", namespace, "--watch-only", "--no-headers", "-o",
         columns], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip

    def read() -> None:
        assert watch.stdout is not None
        for line in watch.stdout:
            parts = line.split()
            if len(parts) == 3 and "Succeeded" in parts[1:]:
                ended.setdefault(parts[0], time.time())

    import threading

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield ended
    finally:
        watch.terminate()
        watch.wait(timeout=10)


async def run_mode(system: System, mode: str, jobs: int, seconds: float) -> dict[str, Any]:
    env = system.env
    namespace = f"bench-{mode}"
    kubectl(env, "create", "namespace", namespace, check=False)
    system.start(f"{mode}-operator", "operator",
                 env={"HORAE_EXECUTION_MIRROR": "1" if mode == "mirror" else "0"})  # fmt: skip
    system.start(f"{mode}-scheduler", "scheduler")
    for i in range(2):
        pool = {"HORAE_POOL_NAMESPACE": namespace, "HORAE_TENANTS": namespace}
        system.start(f"{mode}-worker-{i}", "worker", "--tasks", "bench/noop_tasks.py", env=pool)
    resource = "executions.horae.dev"
    if mode == "aggregated":
        resource = "executions.runs.horae.dev"
        certs = serving_cert(Path(tempfile.mkdtemp(prefix="horae-bench-certs-")),
                             service=SERVICE, namespace=INSTALL_NAMESPACE)  # fmt: skip
        kubectl(env, "create", "namespace", INSTALL_NAMESPACE, check=False)
        port = free_port()
        system.start(f"{mode}-aggregated-api", "aggregated-api", env={
            "HORAE_AGGREGATED_HOST": "127.0.0.1", "HORAE_AGGREGATED_PORT": str(port),
            "HORAE_TLS_CERT_FILE": str(certs.cert_file), "HORAE_TLS_KEY_FILE": str(certs.key_file),
        })  # fmt: skip
        await asyncio.sleep(3)
        kubectl(env, "apply", "-f", "-", input=registration(port=port, ca_pem=certs.ca_pem))
        plane = _Plane(env)
        for _ in range(150):
            if availability(plane)[0] == "True":  # type: ignore[arg-type]
                break
            await asyncio.sleep(0.2)
        else:
            raise SystemExit(f"APIService {APISERVICE} never became Available")
        kubectl(env, "api-resources", "--api-group", "runs.horae.dev")
    await asyncio.sleep(3)
    kubectl(env, "apply", "-f", "-", input=manifests(namespace, jobs))
    with watching(env, namespace, resource) as seen:
        await asyncio.sleep(WARM_UP)
        pids = plane_pids(env)
        pids["operator"] = system.named[f"{mode}-operator"].pid
        if mode == "aggregated":
            pids["aggregated-api"] = system.named[f"{mode}-aggregated-api"].pid
        cpu_before = {n: cpu_seconds(p) for n, p in pids.items()}
        requests_before = requests_by_kind(env)
        start, started = datetime.now(UTC), time.monotonic()
        await asyncio.sleep(seconds)
        end, took = datetime.now(UTC), time.monotonic() - started
        cpu = {n: (cpu_seconds(p) - cpu_before[n]) / took for n, p in pids.items()}
        after = requests_by_kind(env)
        rates = {k: round((v - requests_before.get(k, 0.0)) / took, 1) for k, v in after.items()}
        writes = sum(
            v for k, v in rates.items()
            if k.split()[0] in MUTATING and k.split()[-1].startswith("executions")
        )  # fmt: skip
        busiest = dict(sorted(((k, v) for k, v in rates.items() if v), key=lambda kv: -kv[1])[:8])
        await asyncio.sleep(5)  # what ended at the window's end has time to show
    kubectl(env, "delete", "scheduledjobs", "--all", "-n", namespace, "--wait=false")
    conn = await asyncpg.connect(system.db_url)
    try:
        rows = await conn.fetch(
            "SELECT id, finished_at FROM executions WHERE tenant = $1 AND status = 'succeeded'"
            " AND finished_at BETWEEN $2 AND $3", namespace, start, end,
        )  # fmt: skip
    finally:
        await conn.close()
    lags = sorted(seen[str(r["id"])] - r["finished_at"].timestamp() for r in rows
                  if str(r["id"]) in seen)  # fmt: skip
    for name in [n for n in system.named if n.startswith(f"{mode}-")]:
        system.named[name].terminate()
        system.named[name].wait(timeout=30)
    if mode == "aggregated":
        kubectl(env, "delete", "apiservice", APISERVICE, "--ignore-not-found")
    return {
        "mode": mode, "ended": len(rows), "seen": len(lags),
        "lag_p50": pct(lags, 50) if lags else None, "lag_p95": pct(lags, 95) if lags else None,
        "lag_max": lags[-1] if lags else None, "rate": len(rows) / took,
        "apiserver_cpu": cpu["kube-apiserver"], "etcd_cpu": cpu["etcd"], "writes": writes,
        "cpu": {n: round(c, 3) for n, c in cpu.items()},
        "requests_per_second": busiest,
    }  # fmt: skip


class _Plane:
    """What `availability` needs of a ControlPlane: kubectl with this environment."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["kubectl", *args], env=self.env, capture_output=True, text=True,
                              check=check, timeout=60)  # fmt: skip


def show(value: float | None, unit: str = "s") -> str:
    return "-" if value is None else f"{value:.2f}{unit}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=90)
    args = parser.parse_args()
    async with horae_system("exview") as system:
        kubectl(system.env, "apply", "-f", str(REPO / "crds"))
        kubectl(system.env, "wait", "--for=condition=Established", "crd", "--all")
        results = []
        for mode in ("mirror", "aggregated"):
            results.append(await run_mode(system, mode, args.jobs, args.seconds))
            print(results[-1], flush=True)
    print(f"executions_view: {args.jobs} ScheduledJobs every 2 s, {args.seconds:.0f} s window,"
          f" {os.cpu_count()} cores")  # fmt: skip
    print(f"{'path':<11} {'ended/s':>8} {'seen':>12} {'lag p50':>8} {'p95':>7} {'max':>7}"
          f" {'apiserver CPU':>14} {'etcd CPU':>9} {'writes/s':>9}")  # fmt: skip
    for r in results:
        print(f"{r['mode']:<11} {r['rate']:>8.1f} {r['seen']:>5}/{r['ended']:<6}"
              f" {show(r['lag_p50']):>8} {show(r['lag_p95']):>7} {show(r['lag_max']):>7}"
              f" {r['apiserver_cpu']:>13.3f}s {r['etcd_cpu']:>8.3f}s"
              f" {r['writes']:>9.1f}")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())

"""What the schedulers' coordination costs the Kubernetes API server, and how fast it fails
over: --replicas schedulers (no jobs) on the local control plane. Over --seconds once the
shards are split evenly:

- Lease writes a second at the API server (POST, PUT and DELETE of leases, from
  apiserver_request_total), and kube-apiserver's and etcd's CPU (seconds a second);

then --failovers times: SIGKILL one replica and time until every shard Lease names a live
replica, and SIGTERM one and time the same (its replacement started and the shards split
again between rounds).

    .venv/bin/python -m bench.coordination [--replicas 2] [--seconds 60] [--failovers 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import time
from collections import Counter

from bench.executions_view import MUTATING, cpu_seconds, kubectl, plane_pids, requests_by_kind
from bench.harness import System, horae_system

SHARDS = 64


def holders(env: dict[str, str]) -> Counter[str]:
    found = json.loads(kubectl(env, "get", "leases", "-n", "default", "-l",
                               "horae.dev/shard-lease", "-o", "json"))["items"]  # fmt: skip
    return Counter(x["spec"].get("holderIdentity") or "-" for x in found)


async def held_by(env: dict[str, str], live: set[str], *, even: bool, timeout: float = 60) -> float:
    """Seconds until all 64 shard Leases name one of `live` (`even`: in equal parts, to
    within one)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        held = holders(env)
        shares = [held.get(r, 0) for r in live]
        if sum(shares) == SHARDS and (not even or max(shares) - min(shares) <= 1):
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    raise SystemExit(f"shards never all held by {sorted(live)}: {dict(holders(env))}")


def lease_writes(before: dict[str, float], after: dict[str, float], took: float) -> float:
    return sum(
        (v - before.get(k, 0.0)) / took
        for k, v in after.items()
        if k.split()[0] in MUTATING and k.split()[-1] == "leases"
    )


async def measure(system: System, replicas: int, seconds: float, failovers: int) -> None:
    env = system.env
    live = {f"sched-{i}" for i in range(replicas)}
    for name in sorted(live):
        system.start(name, "scheduler")
    await held_by(env, live, even=True)
    await asyncio.sleep(3)  # the first takes' writes are behind us
    pids = plane_pids(env)
    cpu_before = {n: cpu_seconds(p) for n, p in pids.items()}
    before, started = requests_by_kind(env), time.monotonic()
    await asyncio.sleep(seconds)
    took = time.monotonic() - started
    after = requests_by_kind(env)
    cpu = {n: (cpu_seconds(p) - cpu_before[n]) / took for n, p in pids.items()}
    writes = lease_writes(before, after, took)

    kills: list[float] = []
    terms: list[float] = []
    for n in range(failovers):
        for sig, times in ((signal.SIGKILL, kills), (signal.SIGTERM, terms)):
            victim = sorted(live)[0]
            system.signal(victim, sig)
            live.discard(victim)
            times.append(await held_by(env, live, even=False))
            system.wait(victim)
            newcomer = f"sched-{replicas + 2 * n + (sig == signal.SIGTERM)}"
            system.start(newcomer, "scheduler")
            live.add(newcomer)
            await held_by(env, live, even=True)
            await asyncio.sleep(1)
    print(
        f"coordination: {replicas} scheduler replicas, {SHARDS} shards, {took:.0f} s steady,"
        f" {os.cpu_count()} cores"
    )
    print(f"  Lease writes at the API server: {writes:.2f}/s")
    print(f"  kube-apiserver CPU {cpu['kube-apiserver']:.3f} s/s, etcd CPU {cpu['etcd']:.3f} s/s")
    print(
        "  SIGKILL: every shard held by a live replica after "
        + ", ".join(f"{t:.2f}" for t in kills)
        + " s"
    )
    print(
        "  SIGTERM: every shard held by a live replica after "
        + ", ".join(f"{t:.2f}" for t in terms)
        + " s"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--failovers", type=int, default=3)
    args = parser.parse_args()
    async with horae_system("coord") as system:
        await measure(system, args.replicas, args.seconds, args.failovers)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"{exc.cmd}: {exc.stderr}") from None

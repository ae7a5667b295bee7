"""Operator failover, timed: a leader and a standby operator with the default settings
(`HORAE_OPERATOR_LEASE_SECONDS` 15); the leader is stopped (SIGTERM) or killed (SIGKILL) and
the time from the signal until the standby holds the `horae-operator` Lease is read from
the Lease's own acquireTime. Each round starts a fresh standby and lets it watch for 6-11 s
(a random phase against the leader's renewals) before the signal.

    .venv/bin/python -m bench.operator_failover [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import statistics
import time
from datetime import UTC, datetime

from bench.harness import System, horae_system
from bench.operator_scale import install_crds, kubectl


def lease(env: dict[str, str]) -> dict[str, str]:
    out = kubectl(env, "get", "leases", "-n", "default", "-o", "json")
    found = [x["spec"] for x in json.loads(out)["items"]
             if x["metadata"]["name"] == "horae-operator"]  # fmt: skip
    return found[0] if found else {}


async def leading(env: dict[str, str], identity: str, timeout: float = 60) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spec = lease(env)
        if spec.get("holderIdentity") == identity:
            return spec
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{identity} did not take the leader Lease in {timeout}s")


async def handover(system: System, leader: str, standby: str, sig: int) -> float:
    """Seconds from `sig` sent to `leader` until `standby` took the Lease."""
    system.start(standby, "operator")
    await asyncio.sleep(random.uniform(6, 11))  # a phase against the renewals
    sent = datetime.now(UTC)
    system.signal(leader, sig)
    spec = await leading(system.env, standby)
    system.wait(leader)
    return (datetime.fromisoformat(spec["acquireTime"]) - sent).total_seconds()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    async with horae_system("opfail") as system:
        env = system.env
        install_crds(env)
        system.start("operator-0", "operator")
        await leading(env, "operator-0")
        n = 0
        for name, sig in (("clean stop (SIGTERM)", signal.SIGTERM),
                          ("crash (SIGKILL)", signal.SIGKILL)):  # fmt: skip
            took = []
            for _ in range(args.runs):
                took.append(await handover(system, f"operator-{n}", f"operator-{n + 1}", sig))
                n += 1
            print(f"{name}: standby leading after min {min(took):.2f}s, median "
                  f"{statistics.median(took):.2f}s, max {max(took):.2f}s "
                  f"({', '.join(f'{t:.2f}' for t in took)})")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())

"""Scheduler replicas as real processes against the real API server, Postgres and RabbitMQ:
ownership, fencing, failover. Defaults: Lease 3 s, renew every 1 s."""

from __future__ import annotations

import asyncio
import signal
import time
from datetime import UTC, datetime, timedelta

from tests.support.kube import ControlPlane, free_port
from tests.support.processes import Processes
from tests.support.scheduling import HeldWatch, Published, falling_due, holders, lease_versions
from tests.support.store_rows import StoreRows
from tests.support.wait import readiness, until, until_ready

LEASE = 3.0
RENEW = 1.0


async def balanced(plane: ControlPlane, ns: str, names: list[str]) -> dict[str, set[int]]:
    async def check() -> dict[str, set[int]] | None:
        held = holders(plane, ns)
        counts = [len(held.get(n, ())) for n in names]
        fair = -(-64 // len(names))
        if sum(counts) == 64 and max(counts) <= fair and min(counts) > 0:
            return held
        return None

    return await until(check, timeout=30, interval=0.1, what=f"64 shards spread over {names}")


async def all_held_by(plane: ControlPlane, ns: str, names: set[str]) -> float:
    started = time.monotonic()

    async def check() -> bool:
        held = holders(plane, ns)
        return sum(len(held.get(n, ())) for n in names) == 64

    await until(check, timeout=20, interval=0.05, what=f"all shards held by {names}")
    return time.monotonic() - started


async def test_three_replicas_spread_64_shards_each_held_by_exactly_one(
    control_plane: ControlPlane, namespace: str, processes: Processes
) -> None:
    for _ in range(3):
        processes.start("scheduler", "scheduler")
    names = [f"scheduler-{i}" for i in range(3)]

    async def members() -> bool:
        got = control_plane.get_json("leases", "-n", namespace, "-l", "horae.dev/scheduler-member")
        return len(got["items"]) == 3

    await until(members, timeout=20, what="three member Leases")
    joined = time.monotonic()
    held = await balanced(control_plane, namespace, names)
    took = time.monotonic() - joined
    assert took <= 2 * RENEW + 1.5, f"balanced {took:.1f}s after the third member joined"
    shards = [s for n in names for s in held[n]]
    assert sorted(shards) == list(range(64)), "every shard held by exactly one replica"
    assert all(len(held[n]) <= 22 for n in names), "nobody above its fair share"


async def test_one_replica_takes_all_64_shards_and_then_writes_only_its_member_lease(
    control_plane: ControlPlane, namespace: str, processes: Processes
) -> None:
    """Holding shards costs the API server one Lease write a renew period (the member
    Lease), not one per shard: the shard Leases stand still while the member Lease moves,
    and the replica keeps saying it holds them all (it dispatches them)."""
    port = free_port()
    scheduler = processes.start("scheduler", "scheduler", env={"HORAE_METRICS_PORT": str(port)})
    await until_ready(port)  # once it took part in a round of shard Leases
    await balanced(control_plane, namespace, ["scheduler-0"])

    async def says_it_holds_all() -> bool:
        return await readiness(port) == (200, "holds 64 of 64 shards")

    await until(says_it_holds_all, timeout=10, what="/readyz saying it holds all 64")

    def versions(label: str) -> dict[str, str]:
        return lease_versions(control_plane, namespace, label)

    shards = versions("horae.dev/shard-lease")
    member = versions("horae.dev/scheduler-member")
    renewals: set[str] = set()

    async def member_renewed_twice() -> bool:
        renewals.update(versions("horae.dev/scheduler-member").values())
        return len(renewals - set(member.values())) >= 2

    await until(member_renewed_twice, timeout=15, what="the member Lease renewed twice more")
    assert len(shards) == 64 and versions("horae.dev/shard-lease") == shards
    assert await readiness(port) == (200, "holds 64 of 64 shards")
    assert "Connection pool is full" not in scheduler.log()


async def test_sigkill_hands_shards_over_and_every_execution_is_dispatched(
    control_plane: ControlPlane, namespace: str, processes: Processes, stored: StoreRows,
    broker_url: str, broker_prefix: str,
) -> None:  # fmt: skip
    replicas = [processes.start("scheduler", "scheduler") for _ in range(3)]
    names = [f"scheduler-{i}" for i in range(3)]
    held = await balanced(control_plane, namespace, names)
    job_ids = await falling_due(
        stored, 600, start=timedelta(seconds=2), spread=timedelta(seconds=8)
    )

    await asyncio.sleep(3)  # let the first executions go out before the crash
    victim = max(range(3), key=lambda i: len(held[names[i]]))
    victim_shards = held[names[victim]]
    replicas[victim].kill()
    survivors = {n for i, n in enumerate(names) if i != victim}
    takeover = await all_held_by(control_plane, namespace, survivors)
    assert takeover <= LEASE + RENEW + 1.0, f"takeover took {takeover:.1f}s"

    # No pool serves their tenant: the messages wait in <prefix>.held.
    published = Published(broker_url, broker_prefix)
    await until(lambda: published.every_execution(stored), timeout=30,
                what="every execution dispatched")  # fmt: skip
    rows = await stored.fetch("SELECT id, shard, status FROM executions")
    assert len(rows) == len(job_ids)
    assert {r["status"] for r in rows} == {"scheduled"}, "no worker: left for a claim"
    messages = published.seen
    duplicated = {m for m, n in messages.items() if n > 1}
    dup_shards = {r["shard"] for r in rows if str(r["id"]) in duplicated}
    # The survivors publish the crashed replica's unclaimed executions once more (they
    # cannot know what it published); nothing of the survivors' own shards repeats.
    assert dup_shards <= victim_shards, "only the crashed replica's executions may repeat"
    print(f"takeover {takeover:.2f}s; {len(duplicated)} duplicate messages")


async def test_a_paused_replica_past_its_lease_cannot_dispatch_and_gives_its_shards_up(
    control_plane: ControlPlane,
    namespace: str,
    processes: Processes,
    stored: StoreRows,
    broker_url: str,
    broker_prefix: str,
) -> None:
    a = processes.start("scheduler", "scheduler")
    processes.start("scheduler", "scheduler")
    await balanced(control_plane, namespace, ["scheduler-0", "scheduler-1"])

    async def epochs_of_a() -> set[tuple[int, int]] | None:
        rows = await stored.fetch(
            "SELECT shard, epoch FROM shard_epochs WHERE owner = 'scheduler-0'"
        )
        found = {(r["shard"], r["epoch"]) for r in rows}
        return found if len(found) == 32 else None  # takes land just after the Leases

    old = await until(epochs_of_a, timeout=10, what="shard_epochs to show the 32/32 split")

    async with HeldWatch(broker_url, broker_prefix) as held:
        a.signal(signal.SIGSTOP)
        try:
            await all_held_by(control_plane, namespace, {"scheduler-1"})
            await falling_due(stored, 200, start=timedelta(seconds=1), spread=timedelta(seconds=2))
        finally:
            a.signal(signal.SIGCONT)

        async def all_published() -> bool:
            ids = {r["id"] for r in await stored.fetch("SELECT id FROM executions")}
            return len(ids) == 200 and ids <= set(held.arrived)

        await until(all_published, timeout=30, what="every execution dispatched")
        # It drops the stale Leases, rejoins, and may get a fair share again: only under new
        # epochs (taking a shard, it publishes its unclaimed executions once more).
        balance = await balanced(control_plane, namespace, ["scheduler-0", "scheduler-1"])

    regained = await stored.fetch(
        "SELECT shard, epoch, taken_at FROM shard_epochs WHERE shard = ANY($1::smallint[])",
        sorted(balance["scheduler-0"]),
    )
    assert {(r["shard"], r["epoch"]) for r in regained}.isdisjoint(old), (
        "a shard kept its stale epoch after the pause"
    )
    # Before it took any shard again, it published nothing: every execution went out once.
    back = min((r["taken_at"] for r in regained), default=datetime.now(UTC))
    again = [i for i, times in held.arrived.items() if len(times) > 1 and times[1] < back]
    assert again == [], "published under an epoch the replica had lost"
    assert a.alive()


async def test_sigterm_hands_shards_over_within_a_second(
    control_plane: ControlPlane, namespace: str, processes: Processes
) -> None:
    a = processes.start("scheduler", "scheduler")
    processes.start("scheduler", "scheduler")
    held = await balanced(control_plane, namespace, ["scheduler-0", "scheduler-1"])
    sent = datetime.now(UTC)
    a.signal(signal.SIGTERM)
    await all_held_by(control_plane, namespace, {"scheduler-1"})
    # When each of a's shards changed hands, by the Leases' own acquireTime (polling
    # with kubectl would add its own latency to the measurement).
    leases = control_plane.get_json("leases", "-n", namespace, "-l", "horae.dev/shard-lease")
    acquired = [
        datetime.fromisoformat(x["spec"]["acquireTime"])
        for x in leases["items"]
        if int(x["metadata"]["name"].rsplit("-", 1)[1]) in held["scheduler-0"]
    ]
    handover = (max(acquired) - sent).total_seconds()
    assert 0 < handover < 1.0, f"handover took {handover:.2f}s"
    assert a.popen.wait(timeout=10) == 0

"""Shard ownership against a real kube-apiserver."""

from __future__ import annotations

from collections import Counter

from horae.kube import Leases, load_api_client
from horae.scheduler.leases import ShardLeases
from tests.support.kube import ControlPlane
from tests.support.wait import until


def replica(plane: ControlPlane, namespace: str, name: str, events: list[str]) -> ShardLeases:
    async def gained(shard: int) -> None:
        events.append(f"{name}+{shard}")

    async def lost(shard: int) -> None:
        events.append(f"{name}-{shard}")

    return ShardLeases(
        Leases(load_api_client(str(plane.kubeconfig)), namespace),
        identity=name, shards=64, lease_duration=3, renew_period=0.2,
        on_gained=gained, on_lost=lost,
    )  # fmt: skip


def holders(plane: ControlPlane, namespace: str) -> Counter[str]:
    leases = plane.get_json("leases", "-n", namespace, "-l", "horae.dev/shard-lease")["items"]
    return Counter(x["spec"].get("holderIdentity") or "-" for x in leases)


async def test_two_replicas_split_the_shards_fairly_and_a_leaver_hands_over(
    control_plane: ControlPlane, namespace: str
) -> None:
    events: list[str] = []
    a = replica(control_plane, namespace, "a", events)
    b = replica(control_plane, namespace, "b", events)
    await a.tick()
    assert len(a.held) == 64, "alone, a replica takes every shard"
    assert all(a.valid(s) for s in a.held)

    async def balanced() -> bool:
        await a.tick()
        await b.tick()
        return len(a.held) == 32 and len(b.held) == 32

    await until(balanced, timeout=20, what="32/32 split")
    assert set(a.held).isdisjoint(b.held)
    assert holders(control_plane, namespace) == Counter({"a": 32, "b": 32})

    await b.release_all()
    assert not b.held and holders(control_plane, namespace)["-"] == 32
    await a.tick()  # b's member Lease is gone and its shards are free: taken at once
    assert len(a.held) == 64
    assert holders(control_plane, namespace) == Counter({"a": 64})
    assert sum(e.startswith("b-") for e in events) == 32

"""Shard ownership against a real kube-apiserver."""

from __future__ import annotations

from collections import Counter

from horae.kube import Lease, Leases, load_api_client
from horae.scheduler.leases import ShardLeases, shard_lease_name
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


class ReleasedMidRenewal(Leases):
    """The real Leases adapter, with the scheduler's release of `shard` (its dispatcher
    fenced out) landing while that shard's renewal is in flight: after the renewal's write,
    before the renewal is recorded."""

    def __init__(self, plane: ControlPlane, namespace: str, shard: int) -> None:
        super().__init__(load_api_client(str(plane.kubeconfig)), namespace)
        self.shard = shard
        self.owner: ShardLeases | None = None

    async def write(self, lease: Lease, holder: str | None, duration_s: int, *,
                    acquire: bool) -> Lease:  # fmt: skip
        written = await super().write(lease, holder, duration_s, acquire=acquire)
        renewal = holder is not None and not acquire
        if renewal and lease.name == shard_lease_name(self.shard) and self.owner is not None:
            owner, self.owner = self.owner, None
            await owner.release(self.shard)  # its write (the old version) conflicts
        return written


async def test_a_shard_released_while_its_renewal_is_in_flight_is_not_held_on(
    control_plane: ControlPlane, namespace: str
) -> None:
    """A chaos run lost an execution this way: a dispatcher fenced out of a shard released
    it during the renewal round, the renewal then recorded the shard as held again, and the
    replica renewed for minutes a shard it no longer dispatched, which nobody else could
    take."""
    events: list[str] = []
    leases = ReleasedMidRenewal(control_plane, namespace, shard=5)

    async def note(shard: int) -> None:
        events.append(f"{shard}")

    replica_a = ShardLeases(
        leases, identity="a", shards=8, lease_duration=3, renew_period=0.2,
        on_gained=note, on_lost=note,
    )  # fmt: skip
    await replica_a.tick()
    assert 5 in replica_a.held
    leases.owner = replica_a
    await replica_a.tick()  # renews 5; the release lands mid-renewal
    assert 5 not in replica_a.held
    lease = control_plane.get_json("lease", shard_lease_name(5), "-n", namespace)
    assert lease["spec"].get("holderIdentity") is None, "the shard is free for the others"

"""Shard ownership against a real kube-apiserver."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from horae.kube import Lease, Leases, load_api_client
from horae.scheduler.leases import ShardLeases, member_lease_name, shard_lease_name
from horae.scheduler.main import _watch
from horae.scheduler.members import MemberSessions
from horae.store.members import MemberLocks
from tests.support.kube import ControlPlane
from tests.support.scheduling import lease_versions
from tests.support.wait import until


def replica(
    plane: ControlPlane, namespace: str, name: str, events: list[str], *, shards: int = 64
) -> ShardLeases:
    async def gained(shard: int) -> None:
        events.append(f"{name}+{shard}")

    async def lost(shard: int) -> None:
        events.append(f"{name}-{shard}")

    return ShardLeases(
        Leases(load_api_client(str(plane.kubeconfig)), namespace),
        identity=name, shards=shards, lease_duration=3, renew_period=0.2,
        on_gained=gained, on_lost=lost,
    )  # fmt: skip


async def noop(shard: int) -> None:
    pass


async def split(*replicas: ShardLeases) -> None:
    """Tick the replicas until they hold the shards in equal parts."""
    share = replicas[0].shards // len(replicas)

    async def balanced() -> bool:
        for r in replicas:
            await r.tick()
        return all(len(r.held) == share for r in replicas)

    await until(balanced, timeout=20, what=f"{share} shards each")


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

    await split(a, b)
    assert set(a.held).isdisjoint(b.held)
    assert holders(control_plane, namespace) == Counter({"a": 32, "b": 32})

    await b.release_all()
    assert not b.held and holders(control_plane, namespace)["-"] == 32
    await a.tick()  # b's member Lease is gone and its shards are free: taken at once
    assert len(a.held) == 64
    assert holders(control_plane, namespace) == Counter({"a": 64})
    assert sum(e.startswith("b-") for e in events) == 32


async def test_steady_replicas_write_only_their_member_leases(
    control_plane: ControlPlane, namespace: str
) -> None:
    """The shard Leases are written when shards change hands, not renewed: two replicas
    ticking for a while leave every shard Lease's version as it was, and dispatch all the
    while (each shard `valid`), while each member Lease moves at every tick."""
    a = replica(control_plane, namespace, "a", [])
    b = replica(control_plane, namespace, "b", [])
    await split(a, b)
    shards = lease_versions(control_plane, namespace, "horae.dev/shard-lease")
    members = lease_versions(control_plane, namespace, "horae.dev/scheduler-member")
    for _ in range(5):
        await a.tick()
        await b.tick()
        assert all(r.valid(s) for r in (a, b) for s in r.held)
    assert lease_versions(control_plane, namespace, "horae.dev/shard-lease") == shards
    after = lease_versions(control_plane, namespace, "horae.dev/scheduler-member")
    assert set(after) == {member_lease_name("a"), member_lease_name("b")}
    assert all(after[name] != members[name] for name in after)
    assert holders(control_plane, namespace) == Counter({"a": 32, "b": 32})


async def test_a_replica_that_stops_renewing_stops_dispatching_before_its_shards_move(
    control_plane: ControlPlane, namespace: str
) -> None:
    """A crashed replica (a stops ticking) leaves its shard Leases naming it: the other takes
    them once a's member Lease has stood still a lease duration, within a tick after, and
    a's own clock had already stopped it dispatching each of them by then."""
    a = replica(control_plane, namespace, "a", [])
    taken_while_a_dispatched: list[int] = []

    async def gained(shard: int) -> None:
        if a.valid(shard):
            taken_while_a_dispatched.append(shard)

    b = ShardLeases(
        Leases(load_api_client(str(control_plane.kubeconfig)), namespace),
        identity="b", shards=64, lease_duration=3, renew_period=0.2,
        on_gained=gained, on_lost=gained,
    )  # fmt: skip
    await split(a, b)
    crashed = time.monotonic()  # a's last tick ended: its last member renewal was earlier
    while len(b.held) < 64:
        assert time.monotonic() - crashed < 3 + 3, f"b holds {len(b.held)} after 6 s"
        await asyncio.sleep(0.2)
        await b.tick()
    took = time.monotonic() - crashed
    assert took >= 3 - 0.5, f"taken {took:.2f} s after a's last renewal, before it expired"
    assert not taken_while_a_dispatched
    assert holders(control_plane, namespace) == Counter({"b": 64})


async def test_a_crashed_replicas_member_lease_is_deleted_once_long_silent(
    control_plane: ControlPlane, namespace: str
) -> None:
    """A replica killed without its SIGTERM leaves its member Lease (a Deployment's next pod
    has another name): a live replica deletes it once it has stood still
    `forget_members_after` (the lease duration by default; 4 s here). A live member's Lease, renewed
    meanwhile, stays; and a replica paused that long creates its own again on waking."""
    leases = Leases(load_api_client(str(control_plane.kubeconfig)), namespace)

    def quick(name: str) -> ShardLeases:
        return ShardLeases(
            leases, identity=name, shards=9, lease_duration=3, renew_period=0.2,
            on_gained=noop, on_lost=noop, forget_members_after=4,
        )  # fmt: skip

    a, b, crashed = quick("a"), quick("b"), quick("crashed")
    await split(a, b, crashed)
    members = set(lease_versions(control_plane, namespace, "horae.dev/scheduler-member"))
    assert members == {member_lease_name(n) for n in ("a", "b", "crashed")}
    started = time.monotonic()

    async def forgotten() -> bool:
        await a.tick()
        await b.tick()
        names = set(lease_versions(control_plane, namespace, "horae.dev/scheduler-member"))
        return names == {member_lease_name("a"), member_lease_name("b")}

    await until(
        forgotten, timeout=15, interval=0.2, what="the crashed replica's member Lease deleted"
    )
    assert time.monotonic() - started >= 4 - 0.5, "deleted before it stood still 4 s"
    assert len(a.held) + len(b.held) == 9 and set(a.held).isdisjoint(b.held)

    await crashed.tick()  # it was only paused: it joins again with a new member Lease
    names = set(lease_versions(control_plane, namespace, "horae.dev/scheduler-member"))
    assert member_lease_name("crashed") in names


async def test_a_replica_started_after_a_crash_takes_its_full_share_at_once(
    control_plane: ControlPlane, namespace: str
) -> None:
    """The survivor deletes a crashed replica's member Lease when it judges it gone, so a
    replica started afterwards (a Deployment's next pod) counts only the live members: it
    takes the 32 shards the survivor sheds at once. Before, it counted the crashed member
    live for its own first lease duration, took 22 (ceil(64 / 3)), and the other 10 stayed
    unowned for up to 3 s (under 1,000 executions a second: start lags up to 8 s)."""
    a = replica(control_plane, namespace, "a", [])
    crashed = replica(control_plane, namespace, "crashed", [])
    await split(a, crashed)
    started = time.monotonic()

    async def a_holds_all() -> bool:
        await a.tick()
        return len(a.held) == 64

    await until(a_holds_all, timeout=15, interval=0.2, what="the survivor holding every shard")
    assert time.monotonic() - started >= 3 - 0.5, "taken before the crashed member expired"
    members = set(lease_versions(control_plane, namespace, "horae.dev/scheduler-member"))
    assert members == {member_lease_name("a")}

    newcomer = replica(control_plane, namespace, "newcomer", [])
    await newcomer.tick()  # joins: a holds everything, nothing is free yet
    assert newcomer.live_members == 2
    await a.tick()  # a sees it and sheds down to its share
    assert len(a.held) == 32
    await newcomer.tick()
    assert len(newcomer.held) == 32 and set(newcomer.held).isdisjoint(a.held)


async def test_a_lease_naming_a_replica_for_a_shard_it_does_not_hold_is_handed_back(
    control_plane: ControlPlane, namespace: str
) -> None:
    """Left by a release whose write failed, a Lease naming a live replica would never expire:
    the replica hands it back at its next tick when over its share (the other then takes it),
    and takes one back within its share (a Lease its previous run left)."""
    a = replica(control_plane, namespace, "a", [], shards=8)
    b = replica(control_plane, namespace, "b", [], shards=8)
    await split(a, b)
    leases = Leases(load_api_client(str(control_plane.kubeconfig)), namespace)
    shard = min(b.held)
    found = next(x for x in await leases.list("horae.dev/shard-lease")
                 if x.name == shard_lease_name(shard))  # fmt: skip
    await leases.write(found, "a", 3, acquire=True)  # names a, which does not hold it
    await a.tick()
    assert shard not in a.held and len(a.held) == 4
    await b.tick()  # lost (the Lease no longer named it), then taken again: it was free
    assert shard in b.held
    assert holders(control_plane, namespace) == Counter({"a": 4, "b": 4})

    c = replica(control_plane, namespace, "c", [], shards=8)
    lone = next(x for x in await leases.list("horae.dev/shard-lease")
                if x.name == shard_lease_name(0))  # fmt: skip
    await leases.write(lone, "c", 3, acquire=True)  # c's previous run held shard 0
    await c.tick()
    assert 0 in c.held, "a Lease naming c is c's to take again within its share"


class ReleasedMidRenewal(Leases):
    """The real Leases adapter, with the scheduler's release of `shard` (its dispatcher
    fenced out) landing while the replica's member renewal is in flight: after the
    renewal's write, before the tick goes on to the shards it holds."""

    def __init__(self, plane: ControlPlane, namespace: str, shard: int) -> None:
        super().__init__(load_api_client(str(plane.kubeconfig)), namespace)
        self.shard = shard
        self.owner: ShardLeases | None = None

    async def write(self, lease: Lease, holder: str | None, duration_s: int, *,
                    acquire: bool) -> Lease:  # fmt: skip
        written = await super().write(lease, holder, duration_s, acquire=acquire)
        renewal = holder is not None and not acquire
        if renewal and lease.name == member_lease_name("a") and self.owner is not None:
            owner, self.owner = self.owner, None
            await owner.release(self.shard)  # its write (the old version) conflicts
        return written


async def test_a_shard_released_while_its_renewal_is_in_flight_is_not_held_on(
    control_plane: ControlPlane, namespace: str
) -> None:
    """A chaos run lost an execution this way (when every shard Lease was renewed): a
    dispatcher fenced out of a shard released it during the renewal round, the renewal then
    recorded the shard as held again, and the replica renewed for minutes a shard it no
    longer dispatched, which nobody else could take."""
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
    await replica_a.tick()  # the release lands while the member Lease is renewed
    assert 5 not in replica_a.held
    lease = control_plane.get_json("lease", shard_lease_name(5), "-n", namespace)
    assert lease["spec"].get("holderIdentity") is None, "the shard is free for the others"


async def test_a_crashed_replicas_shards_move_a_lease_duration_after_its_last_renewal(
    control_plane: ControlPlane, namespace: str
) -> None:
    """The survivor dates the member Lease's renewals as its watch sees them, and looks again
    at the instant the crashed replica's last one is a lease duration old: the shards move
    then, not up to two renew periods later (when it dated a renewal by its next list, and
    looked only at its next tick: 4-5 s here, with the renewal just after a look)."""
    a = replica(control_plane, namespace, "a", [])
    api = load_api_client(str(control_plane.kubeconfig))
    looked = asyncio.Event()
    b = ShardLeases(
        Leases(api, namespace), identity="b", shards=64, lease_duration=3, renew_period=1.0,
        on_gained=noop, on_lost=noop, on_tick=looked.set,
    )  # fmt: skip
    stop, watch_stop = asyncio.Event(), _watch(api, namespace, b, asyncio.get_running_loop())
    loop = asyncio.create_task(b.run(stop))
    try:

        async def split_with_b() -> bool:
            await a.tick()
            return len(a.held) == 32 and len(b.held) == 32

        await until(split_with_b, timeout=20, interval=0.3, what="32 shards each")
        looked.clear()
        await looked.wait()  # b has just looked: its next list is a renew period away
        await a.tick()  # a's last renewal, then a "crashes"
        renewed = time.monotonic()
        while len(b.held) < 64:
            await asyncio.sleep(0.02)
            assert time.monotonic() - renewed < 10, f"b holds {len(b.held)} after 10 s"
        took = time.monotonic() - renewed
        assert 3 - 0.1 <= took <= 3 + 0.8, f"taken {took:.2f} s after a's last renewal"
    finally:
        stop.set()
        watch_stop.set()
        await loop


def with_session(
    plane: ControlPlane, namespace: str, name: str, url: str
) -> tuple[ShardLeases, MemberSessions]:
    """A replica wired as the scheduler wires one: its session lock in Postgres (as the
    scheduler's login role), its Lease loop told when another's session ends."""
    sessions = MemberSessions(MemberLocks(url), name)
    leases = ShardLeases(
        Leases(load_api_client(str(plane.kubeconfig)), namespace), identity=name, shards=64,
        lease_duration=3, renew_period=1.0, on_gained=noop, on_lost=noop, sessions=sessions,
    )  # fmt: skip
    sessions.members = leases.members
    sessions.on_ended = leases.wake.set
    return leases, sessions


@dataclass
class Pair:
    """Replica a, ticked by the test, and replica b, running as the scheduler runs it (its
    Lease loop, watch and session looks), holding 32 shards each; b has seen a's lock."""

    a: ShardLeases
    a_sessions: MemberSessions
    b: ShardLeases
    b_sessions: MemberSessions

    async def split(self) -> bool:
        await self.a.tick()
        return len(self.a.held) == 32 and len(self.b.held) == 32 and "a" in self.b.members()


@asynccontextmanager
async def pair(plane: ControlPlane, namespace: str, url: str) -> AsyncIterator[Pair]:
    a, a_sessions = with_session(plane, namespace, "a", url)
    b, b_sessions = with_session(plane, namespace, "b", url)
    api = load_api_client(str(plane.kubeconfig))
    stop, watch_stop = asyncio.Event(), _watch(api, namespace, b, asyncio.get_running_loop())
    loops = [asyncio.create_task(b.run(stop)), asyncio.create_task(b_sessions.run(stop))]
    try:
        await a_sessions.look()
        assert a_sessions.holding()
        both = Pair(a, a_sessions, b, b_sessions)
        await until(both.split, timeout=20, interval=0.3, what="32 shards each")

        async def b_sees_a() -> bool:
            return b_sessions.seen_held("a")

        await until(b_sees_a, timeout=5, what="b seeing a's lock held")
        yield both
    finally:
        stop.set()
        watch_stop.set()
        await asyncio.gather(*loops)
        await b_sessions.close()
        await a_sessions.close()


async def test_a_replica_whose_process_died_loses_its_shards_a_renew_period_after_its_last_renewal(
    control_plane: ControlPlane, namespace: str, role_urls: dict[str, str]
) -> None:
    """A dead process's Postgres session ends at once, and with it its session lock: the
    survivor, seeing the lock gone, judges the member gone once its Lease has stood still a
    renew period (1 s here, plus 0.25), not the lease duration (3 s; at least 2.9 s after
    the last renewal before, as the test above shows for a replica whose lock it never saw)."""
    async with pair(control_plane, namespace, role_urls["scheduler"]) as p:
        await p.a.tick()  # a's last renewal; then its process "dies": its session ends
        renewed = time.monotonic()
        await p.a_sessions.close()
        seen_ended = False  # (b forgets it once a's member Lease is gone: looked for meanwhile)
        while len(p.b.held) < 64:
            seen_ended = seen_ended or p.b_sessions.ended("a")
            await asyncio.sleep(0.02)
            assert time.monotonic() - renewed < 10, f"b holds {len(p.b.held)} after 10 s"
        took = time.monotonic() - renewed
        assert 1.25 - 0.1 <= took <= 1.25 + 0.6, f"taken {took:.2f} s after a's last renewal"
        assert seen_ended, "b judged a by its session's end"
        members = set(lease_versions(control_plane, namespace, "horae.dev/scheduler-member"))
        assert members == {member_lease_name("b")}, "a's member Lease deleted when judged gone"


async def test_a_live_replica_whose_session_lock_is_lost_keeps_its_shards(
    control_plane: ControlPlane, namespace: str, role_urls: dict[str, str]
) -> None:
    """A session ended while the process lives (its connection cut) is not a death: the
    replica goes on renewing its Lease, so the others leave its shards alone; meanwhile it
    dispatches only within a renew period (+0.25 s) of its last renewal, the limit by which
    the others would judge it (and do, once it stops renewing), and it takes its lock again
    on its next look."""
    async with pair(control_plane, namespace, role_urls["scheduler"]) as p:
        await p.a_sessions.close()  # the session ends; a lives on and renews
        assert not p.a_sessions.holding()

        async def b_saw_it_end() -> bool:
            return p.b_sessions.ended("a")

        await until(b_saw_it_end, timeout=5, what="b seeing a's session end")
        shard = min(p.a.held)
        for _ in range(8):  # a renews every 0.5 s for 4 s: beyond the lease duration
            await p.a.tick()
            assert p.a.valid(shard)
            await asyncio.sleep(0.5)
        assert len(p.a.held) == 32 and len(p.b.held) == 32, "a's shards stayed a's"
        await asyncio.sleep(1.3)  # no renewal for longer than the shorter limit
        assert not p.a.valid(shard), "without its lock, a stops dispatching after 1.25 s"
        await p.a_sessions.look()  # a takes its lock again (b may have judged it gone)
        assert p.a_sessions.holding()
        await until(p.split, timeout=20, interval=0.3, what="32 shards each again")
        assert p.a.valid(min(p.a.held))

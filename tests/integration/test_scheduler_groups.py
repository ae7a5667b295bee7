"""The scheduler over two store groups on two real PostgreSQL clusters, with the real
kube-apiserver and RabbitMQ: dispatch in both groups, shards moved under a running
scheduler, and tenants' allowances shared between the groups."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from prometheus_client import REGISTRY

from horae import broker
from horae.config import BrokerSettings, DatabaseSettings, KubeSettings, SchedulerSettings, Settings
from horae.errors import StoreError
from horae.kube import Leases, load_api_client
from horae.models import JobSource, JobSpec
from horae.probes import Probes
from horae.scheduler.allowances import Rebalancer
from horae.scheduler.main import Scheduler, build
from horae.scheduler.maintenance import Maintenance
from horae.store import dispatch, jobs, moves, tenants
from horae.store.groups import MAIN, Store
from horae.store.moves import move_shards
from horae.supervise import Supervisor
from tests.support.db_roles import LoginRoles
from tests.support.groups import SECOND, SECOND_DB, drop_database, job_in, split_store
from tests.support.kube import ControlPlane
from tests.support.scheduling import HeldWatch
from tests.support.wait import until


@pytest.fixture
def scheduler_url(db_url: str, second_url: str, second_cluster_roles: LoginRoles) -> str:
    """The two-group store as the scheduler's own PostgreSQL role sees it."""
    return second_cluster_roles.url(db_url, "scheduler")


@asynccontextmanager
async def scheduler(
    db_url: str, broker_url: str, prefix: str, plane: ControlPlane, namespace: str
) -> AsyncIterator[Scheduler]:
    """`horae scheduler`'s parts, as `run` wires them, in this process; once it holds every
    shard."""
    settings = Settings(
        database=DatabaseSettings(url=db_url, pool_size=5),
        broker=BrokerSettings(url=broker_url, prefix=prefix),
        kube=KubeSettings(namespace=namespace, kubeconfig=str(plane.kubeconfig)),
        scheduler=SchedulerSettings(identity="s", refresh_period=timedelta(seconds=1)),
    )
    store = await Store.open(db_url, size=5)
    connection = await broker.connect(broker_url)
    publisher = broker.Publisher(connection, broker.Names(prefix))
    await publisher.start()
    api = load_api_client(str(plane.kubeconfig), connections=40)
    probes = Probes()
    parts = build(settings, store, publisher, api, probes)
    stop = asyncio.Event()
    supervisor = Supervisor(stop)
    tasks = parts.start(stop, probes, supervisor)
    try:

        async def holds_all() -> bool:
            return len(parts.router.held) == 64 and probes.readiness()[0]

        await until(holds_all, timeout=30, what="every shard held")
        yield parts
    finally:
        stop.set()
        await parts.shutdown(tasks)
        await connection.close()
        await store.close()
        api.close()
    assert supervisor.failed == []  # no part ended on its own (each test's last check)


async def create_due(
    store: Store, shards: list[int], count: int, *, start: timedelta, spread: timedelta,
    tenant: str = "t",
) -> list[uuid.UUID]:  # fmt: skip
    """`count` one-off jobs in `shards` (in turn), due evenly over [now + start, + spread],
    each created in its shard's group."""
    now = datetime.now(UTC)
    new = [
        jobs.NewJob(
            spec=JobSpec(task="t", run_at=now + start + spread * (i / max(count - 1, 1))),
            tenant=tenant, source=JobSource.API, job_id=job_in(shards[i % len(shards)]),
        )
        for i in range(count)
    ]  # fmt: skip
    for _, database in store.each():
        mine = [j for j in new if store.for_job(j.job_id) is database]
        async with database.acquire() as conn:
            await jobs.create_jobs(conn, mine, shards=64, now=now)
    return [j.job_id for j in new]


async def rows(url: str, job_ids: list[uuid.UUID]) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetch(
            "SELECT id, job_id, shard, status::text, due_at, enqueued_at, dispatch_epoch"
            " FROM executions WHERE job_id = ANY($1)",
            job_ids,
        )
    finally:
        await conn.close()


def dispatched_in(group: str) -> float:
    return REGISTRY.get_sample_value("horae_group_dispatched_total", {"group": group}) or 0.0


async def test_the_scheduler_dispatches_the_shards_of_both_groups(
    db_url: str, second_url: str, scheduler_url: str, broker_url: str, broker_prefix: str,
    control_plane: ControlPlane, namespace: str,
) -> None:  # fmt: skip
    # As its own role, reaching the second group with the same credentials.
    before = {g: dispatched_in(g) for g in (MAIN, SECOND)}
    async with (
        scheduler(scheduler_url, broker_url, broker_prefix, control_plane, namespace),
        HeldWatch(broker_url, broker_prefix) as held,
    ):
        owner = await Store.open(db_url, size=2)  # as the API would create them
        try:
            job_ids = await create_due(
                owner, list(range(64)), 64, start=timedelta(seconds=1), spread=timedelta(seconds=2)
            )
        finally:
            await owner.close()

        async def all_published() -> bool:
            found = [*await rows(db_url, job_ids), *await rows(second_url, job_ids)]
            return len(found) == 64 and all(r["id"] in held.arrived for r in found)

        await until(all_published, timeout=30, what="every execution published")
    main, second = await rows(db_url, job_ids), await rows(second_url, job_ids)
    # Each group dispatched its own shards' rows (left scheduled: no worker claims them).
    assert sorted(r["shard"] for r in main) == list(range(0, 64, 2))
    assert sorted(r["shard"] for r in second) == list(range(1, 64, 2))
    assert {r["status"] for r in [*main, *second]} == {"scheduled"}
    # No pool serves their tenant: the messages went to <prefix>.held, one per execution.
    assert {i: len(t) for i, t in held.arrived.items()} == {r["id"]: 1 for r in [*main, *second]}
    assert dispatched_in(MAIN) - before[MAIN] == 32
    assert dispatched_in(SECOND) - before[SECOND] == 32


async def test_shards_moved_under_a_running_scheduler_go_on_from_their_new_group_once(
    db_url: str, second_url: str, broker_url: str, broker_prefix: str,
    control_plane: ControlPlane, namespace: str,
) -> None:  # fmt: skip
    # Shards 4 and 6 go from main to second, 9 from second to main, while executions of
    # theirs (and of shards 2 and 3, left where they are) fall due every 40 ms.
    moving, staying = [4, 6, 9], [2, 3]
    lost = REGISTRY.get_sample_value("horae_lease_transitions_total", {"change": "lost"}) or 0
    async with (
        scheduler(db_url, broker_url, broker_prefix, control_plane, namespace) as s,
        HeldWatch(broker_url, broker_prefix) as held,
    ):
        epochs = {
            g: dict(s.router.parts(g).dispatcher.epochs) for g in (MAIN, SECOND)
        }  # fmt: skip
        job_ids = await create_due(
            s.store, moving + staying, 250, start=timedelta(seconds=1),
            spread=timedelta(seconds=10),
        )  # fmt: skip

        async def a_third_published() -> bool:  # the move lands while they fall due
            return len(held.arrived) >= 80

        await until(a_third_published, timeout=20, what="a third of them published")
        await move_shards(db_url, [4, 6], SECOND)
        await move_shards(db_url, [9], MAIN)
        moved_at = datetime.now(UTC)

        async def all_published() -> bool:
            found = [*await rows(db_url, job_ids), *await rows(second_url, job_ids)]
            return len(found) == 250 and all(r["id"] in held.arrived for r in found)

        await until(all_published, timeout=40, what="every execution published")
        now_in = {shard: s.store.catalog.group_of(shard) for shard in moving}
        held_in = {shard: s.router.held[shard] for shard in moving}
        after = {g: dict(s.router.parts(g).dispatcher.epochs) for g in (MAIN, SECOND)}
        leases = set(s.shard_leases.held)
        lost = (
            REGISTRY.get_sample_value("horae_lease_transitions_total", {"change": "lost"}) or 0
        ) - lost
    assert now_in == {4: SECOND, 6: SECOND, 9: MAIN} == held_in
    assert leases == set(range(64)) and lost == 0, "no shard's Lease was given up"
    main, second = await rows(db_url, job_ids), await rows(second_url, job_ids)
    # Every execution has one row, in the group that holds its shard now...
    assert {r["shard"] for r in main} == {2, 9} and {r["shard"] for r in second} == {3, 4, 6}
    assert len(main) + len(second) == 250
    assert len({r["id"] for r in [*main, *second]}) == 250
    # ...and went out once; one of a moved shard published before the move and not claimed
    # (no worker here) once more by the new group, which cannot know it was published.
    times = {r["id"]: len(held.arrived[r["id"]]) for r in [*main, *second]}
    assert {times[r["id"]] for r in [*main, *second] if r["shard"] in staying} == {1}
    due_after = [r for r in [*main, *second] if r["shard"] in moving and r["due_at"] > moved_at]
    assert due_after and {times[r["id"]] for r in due_after} == {1}, "twice after the move"
    assert set(times.values()) <= {1, 2}
    # Those due after the move went out from the new group on time.
    late = [
        (held.arrived[r["id"]][0] - r["due_at"]).total_seconds()
        for r in due_after
        if r["due_at"] > moved_at + timedelta(seconds=1)
    ]
    assert late and max(late) < 1.0, f"dispatched up to {max(late):.2f}s late after the move"
    # The shards left in place kept their epochs: nothing moved them or fenced them.
    assert {2: epochs[MAIN][2], 3: epochs[SECOND][3]} == {2: after[MAIN][2], 3: after[SECOND][3]}


async def test_a_move_that_fails_leaves_its_shard_dispatched_where_it_was(
    db_url: str, second_url: str, broker_url: str, broker_prefix: str,
    control_plane: ControlPlane, namespace: str, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # Shard 4's move cannot lock a row a client holds (300 ms each attempt, here): it fails
    # after fencing the scheduler's dispatch out of the shard, while executions of it fall
    # due every 80 ms. The scheduler takes the shard again where it was, keeping its Lease.
    monkeypatch.setattr(moves, "MOVE_LOCK_TIMEOUT_MS", 300)
    lost = REGISTRY.get_sample_value("horae_lease_transitions_total", {"change": "lost"}) or 0
    async with (
        scheduler(db_url, broker_url, broker_prefix, control_plane, namespace) as s,
        HeldWatch(broker_url, broker_prefix) as held,
    ):
        before = s.router.parts(MAIN).dispatcher.epochs[4]
        [later] = await create_due(s.store, [4], 1, start=timedelta(hours=1), spread=timedelta())
        job_ids = await create_due(
            s.store, [4], 100, start=timedelta(seconds=1), spread=timedelta(seconds=8)
        )
        client = await asyncpg.connect(db_url)
        try:
            holding = client.transaction()
            await holding.start()
            await client.execute("SELECT 1 FROM executions WHERE job_id = $1 FOR UPDATE", later)

            async def some_published() -> bool:
                return len(held.arrived) >= 30

            await until(some_published, timeout=20, what="some of them published")
            with pytest.raises(StoreError, match="LockNotAvailable"):
                await move_shards(db_url, [4], SECOND)
            failed_at = datetime.now(UTC)
            await holding.rollback()
        finally:
            await client.close()

        async def all_published() -> bool:
            found = await rows(db_url, job_ids)
            return len(found) == 100 and all(r["id"] in held.arrived for r in found)

        await until(all_published, timeout=30, what="every execution published")
        group, held_in = s.store.catalog.group_of(4), s.router.held[4]
        after = s.router.parts(MAIN).dispatcher.epochs.get(4)
        leases = set(s.shard_leases.held)
        lost = (
            REGISTRY.get_sample_value("horae_lease_transitions_total", {"change": "lost"}) or 0
        ) - lost
    assert group == held_in == MAIN
    assert leases == set(range(64)) and lost == 0, "the Lease was kept"
    assert after is not None and after >= before + 2, "fenced by the move, then taken again"
    assert await rows(second_url, job_ids) == []
    found = await rows(db_url, job_ids)
    due_after = [r for r in found if r["due_at"] > failed_at + timedelta(seconds=1)]
    late = [(held.arrived[r["id"]][0] - r["due_at"]).total_seconds() for r in due_after]
    assert late and max(late) < 1.0, f"dispatched up to {max(late):.2f}s late after the move"
    assert {len(held.arrived[r["id"]]) for r in due_after} == {1}


async def allowance(url: str, tenant: str) -> int | None:
    conn = await asyncpg.connect(url)
    try:
        value: int | None = await conn.fetchval(
            "SELECT allowance FROM tenants WHERE name = $1", tenant
        )
        return value
    finally:
        await conn.close()


async def set_status(url: str, job_ids: list[uuid.UUID], status: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        if status == "running":
            sql = ("UPDATE executions SET status = 'running', lease_owner = 'w',"
                   " started_at = now(), lease_until = now() + interval '5 minutes'"
                   " WHERE job_id = ANY($1)")  # fmt: skip
        else:
            sql = ("UPDATE executions SET status = 'succeeded', lease_until = NULL,"
                   " finished_at = now() WHERE job_id = ANY($1)")  # fmt: skip
        await conn.execute(sql, job_ids)
    finally:
        await conn.close()


async def test_allowances_follow_demand_and_never_add_up_to_more_than_the_limit(
    db_url: str, second_url: str, scheduler_url: str
) -> None:
    store = await Store.open(db_url, size=4)
    as_scheduler = await Store.open(scheduler_url, size=4)
    rebalancer = Rebalancer(as_scheduler)
    even, odd = list(range(0, 64, 2)), list(range(1, 64, 2))
    try:
        async with store.home.acquire() as conn:
            await tenants.set_tenant_limit(conn, "acme", 4)
        soon = {"start": timedelta(seconds=1), "spread": timedelta()}
        # Running in both groups; all the backlog in main.
        main_running = await create_due(store, even, 1, tenant="acme", **soon)
        second_running = await create_due(store, odd, 1, tenant="acme", **soon)
        await set_status(db_url, main_running, "running")
        await set_status(second_url, second_running, "running")
        main_backlog = await create_due(store, even, 6, tenant="acme", **soon)
        assert (await rebalancer.rebalance())["acme"] == {MAIN: 3, SECOND: 1}
        async with store.database(SECOND).acquire() as conn:  # the limit, copied, and the
            assert await dispatch.tenant_limits(conn, ["acme"]) == {"acme": 1}  # gate's share

        sums: list[int] = []
        stop = asyncio.Event()

        async def sample() -> None:
            """Both allowances at one instant: main's, unchanged around a read of second's."""
            while not stop.is_set():
                first, there = await allowance(db_url, "acme"), await allowance(second_url, "acme")
                if (
                    first is not None
                    and there is not None
                    and first == await allowance(db_url, "acme")
                ):
                    sums.append(first + there)

        async def rebalance() -> None:
            while not stop.is_set():
                await rebalancer.rebalance()

        tasks = [asyncio.create_task(sample()), asyncio.create_task(rebalance())]
        try:
            # The backlog moves to second: its allowance grows as far as main's running
            # execution lets it...
            await set_status(db_url, main_backlog, "succeeded")
            await create_due(store, odd, 6, tenant="acme", **soon)

            async def shares(main: int, second: int) -> bool:
                return (await allowance(db_url, "acme"), await allowance(second_url, "acme")) == (
                    main,
                    second,
                )

            await until(lambda: shares(1, 3), timeout=10, what="main 1 (its running), second 3")
            # ...and takes the whole limit once main runs nothing.
            await set_status(db_url, main_running, "succeeded")
            await until(lambda: shares(0, 4), timeout=10, what="main 0, second all 4")
        finally:
            stop.set()
            await asyncio.gather(*tasks)
        assert sums and max(sums) <= 4, f"allowances added up to {max(sums)}"
    finally:
        await store.close()
        await as_scheduler.close()


@pytest.mark.one_group  # starts with one group
async def test_with_one_group_allowances_stay_unset(db_url: str) -> None:
    store = await Store.open(db_url, size=2)
    try:
        async with store.home.acquire() as conn:
            await tenants.set_tenant_limit(conn, "acme", 4)
        assert await Rebalancer(store).rebalance() == {}
        assert await allowance(db_url, "acme") is None
    finally:
        await store.close()


async def test_partitions_are_made_ahead_in_every_group(
    db_url: str, second_url: str, scheduler_url: str, control_plane: ControlPlane,
    namespace: str,
) -> None:  # fmt: skip
    ahead = f"executions_{(datetime.now(UTC) + timedelta(days=3)).strftime('%Y%m%d')}"
    exists = "SELECT to_regclass($1) IS NOT NULL"
    conn = await asyncpg.connect(second_url)
    try:
        await conn.execute(f"DROP TABLE {ahead}")  # as if the group had been added yesterday
        store = await Store.open(scheduler_url, size=2)
        api = load_api_client(str(control_plane.kubeconfig))
        try:
            maintenance = Maintenance(
                store, Leases(api, namespace), identity="s",
                lease_duration=timedelta(seconds=30), ahead_days=3,
            )  # fmt: skip
            await maintenance.tick()
        finally:
            await store.close()
            api.close()
        assert maintenance.holder
        assert await conn.fetchval(exists, ahead)
    finally:
        await conn.close()


@pytest.mark.one_group  # starts with one group
async def test_a_group_added_while_the_scheduler_runs_is_dispatched_too(
    db_url: str, broker_url: str, broker_prefix: str, control_plane: ControlPlane,
    namespace: str,
) -> None:  # fmt: skip
    name = f"horae_g_{uuid.uuid4().hex[:10]}"
    try:
        async with (
            scheduler(db_url, broker_url, broker_prefix, control_plane, namespace) as s,
            HeldWatch(broker_url, broker_prefix) as held,
        ):
            assert s.store.groups() == [MAIN]
            second_url = await split_store(db_url, name)  # the odd shards move there

            async def second_started() -> bool:
                return SECOND in s.store.groups() and all(
                    s.router.held.get(shard) == SECOND for shard in range(1, 64, 2)
                )

            await until(second_started, timeout=15, what="the odd shards taken in `second`")
            job_ids = await create_due(
                s.store, list(range(64)), 64, start=timedelta(seconds=1),
                spread=timedelta(seconds=1),
            )  # fmt: skip

            async def all_published() -> bool:
                found = [*await rows(db_url, job_ids), *await rows(second_url, job_ids)]
                return len(found) == 64 and all(r["id"] in held.arrived for r in found)

            await until(all_published, timeout=30, what="every execution published")
        second = await rows(second_url, job_ids)
        assert sorted(r["shard"] for r in second) == list(range(1, 64, 2))
    finally:
        await drop_database(SECOND_DB, name)

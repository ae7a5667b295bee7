"""Horae under the shared load (bench/load.py): the same arrivals the peers get, created
through the job API (`POST /jobs:batch`), run by real `horae` processes on this machine.

    .venv/bin/python -m bench.horae_driver --scenario sustained --rate 2000 --seconds 120
    .venv/bin/python -m bench.horae_driver --scenario top --count 20000
    .venv/bin/python -m bench.horae_driver --scenario failover --rate 1000
    .venv/bin/python -m bench.horae_driver --scenario worker-faults --rate 1000
    .venv/bin/python -m bench.horae_driver --scenario sustained --rate 2000 --groups 2
    .venv/bin/python -m bench.horae_driver --scenario cron --rate 2000 --seconds 60

`--groups 2` splits the store over the two local PostgreSQL clusters (bench.harness:
the odd shards in group `second`, on HORAE_SECOND_DATABASE_URL's cluster) before anything
starts; every count, lag, statement and WAL figure is then read from both, and the Result
gains each group's own figures (`groups`). `--groups 2 --one-cluster` puts the second
group in a database of the first cluster instead: the routing and the per-group batches
without a second cluster's own costs (the cluster's WAL and CPU are then main's figures).

Processes: one API, one scheduler (two for `failover`), two workers with 64 concurrent
handlers each (a no-op). Start lag is `started_at - due_at` from the executions table
(stamped by the worker as it claims, just before the handler runs). Prints progress on
stderr and one `Result` JSON line on stdout per scenario (three for `failover`: a
scheduler SIGKILLed and restarted in place, one SIGKILLed and replaced by a new pod, and a
rolling restart; two for `worker-faults`: a worker SIGKILLed
and a worker frozen with SIGSTOP for 10 s). `cron` is the recurring load instead of
one-offs: `--rate` jobs firing every second (`* * * * * *`), so each run's next occurrence
is the scheduler's insert and each run rewrites its job's row (its next fire time, its
latest outcome); its Result counts every run of the jobs (a Horae-only scenario: the peers'
load is one-offs).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp

from bench import pgwatch
from bench.harness import REPO, SHARDS, System, horae_system
from bench.load import TENANTS as TENANT_COUNT
from bench.load import Arrival, Result, by_second, cpu_delta, cpu_snapshot, sustained, top_of_hour
from bench.pgwatch import PgWatch
from bench.stores import Stores, Usage, figures, summary

TASKS = REPO / "bench" / "noop_tasks.py"
TOKEN = "bench-token"
TENANTS = [f"t{i}" for i in range(TENANT_COUNT)]  # one bearer token each: f"{TOKEN}-{tenant}"
PORT = 18081
AHEAD = 2.0  # seconds: each second's arrivals are created this long before it starts
BATCH = 1000  # jobs per POST /jobs:batch (the API's limit)


def log(msg: str) -> None:
    print(f"[horae {datetime.now(UTC):%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def start_horae(system: System, *, schedulers: int, workers: int, concurrency: int) -> None:
    tokens = Path(tempfile.mkdtemp()) / "tokens"
    tokens.write_text("".join(f"{TOKEN}-{t},{t}\n" for t in TENANTS))
    system.env |= {"HORAE_API_TOKENS_FILE": str(tokens), "HORAE_API_KUBERNETES_AUTH": "false"}
    system.env["HORAE_TENANTS"] = ",".join(TENANTS)  # the workers: one pool serving them all
    system.start("api", "api", "--port", str(PORT))
    for i in range(schedulers):
        system.start(f"scheduler-{i}", "scheduler")
    for i in range(workers):
        system.start(f"worker-{i}", "worker", "--tasks", str(TASKS),
                     "--concurrency", str(concurrency))  # fmt: skip


async def ready(stores: Stores, http: aiohttp.ClientSession, system: System) -> None:
    """The API answers and every shard has a scheduler for owner, in the group it lives in
    (a group a shard moved out of keeps its row, marked moved out; the group it moved to
    names the move as owner until a scheduler takes it)."""
    schedulers = [name for name in system.named if name.startswith("scheduler")]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            async with http.get("/readyz") as r:
                api_up = r.status == 200
        except aiohttp.ClientError:
            api_up = False
        owned = await stores.each(
            "SELECT count(*) FROM shard_epochs WHERE owner = ANY($1::text[]) AND NOT moved_out",
            schedulers,
        )
        if api_up and sum(owned.values()) == SHARDS:
            await asyncio.sleep(2)  # workers: queues declared and consuming
            return
        await asyncio.sleep(0.5)
    held = ", ".join(f"{n} {c}" for n, c in owned.items())
    raise SystemExit(f"horae did not become ready in 60 s (API up: {api_up}; shards held by a "
                     f"scheduler, by group: {held}; of {SHARDS})")  # fmt: skip


async def owns_shards(stores: Stores, identity: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        query = "SELECT count(*) FROM shard_epochs WHERE owner = $1 AND NOT moved_out"
        if await stores.sum(query, identity):
            return
        await asyncio.sleep(0.2)
    log(f"{identity} holds no shard after {timeout:g} s")


async def post_jobs(
    http: aiohttp.ClientSession, by_tenant: dict[str, list[dict[str, object]]]
) -> None:
    """Each tenant's job specs as that tenant, in batches, the tenants concurrently."""

    async def as_tenant(tenant: str, jobs: list[dict[str, object]]) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}-{tenant}"}
        for i in range(0, len(jobs), BATCH):
            body = {"jobs": jobs[i : i + BATCH]}
            async with http.post("/jobs:batch", json=body, headers=headers) as r:
                if r.status != 201:
                    raise SystemExit(f"POST /jobs:batch answered {r.status}: {await r.text()}")

    await asyncio.gather(*(as_tenant(t, jobs) for t, jobs in by_tenant.items()))


async def create(http: aiohttp.ClientSession, arrivals: list[Arrival]) -> None:
    """Each tenant's arrivals as one-offs of that tenant."""
    by_tenant: dict[str, list[dict[str, object]]] = {}
    for a in arrivals:
        spec = {"task": "bench.noop", "run_at": a.due.isoformat(), "payload": {"seq": a.seq}}
        by_tenant.setdefault(a.tenant, []).append(spec)
    await post_jobs(http, by_tenant)


async def feed(http: aiohttp.ClientSession, arrivals: list[Arrival]) -> None:
    """Create each second's arrivals AHEAD seconds before that second."""
    for group in by_second(arrivals):
        wait = (group[0].due - datetime.now(UTC)).total_seconds() - AHEAD
        if wait > 0:
            await asyncio.sleep(wait)
        await create(http, group)


async def settle(stores: Stores, expected: int, last_due: datetime, grace: float) -> None:
    """Until every execution has started (or `grace` seconds after the last due time)."""
    while True:
        started = await stores.sum("SELECT count(*) FROM executions WHERE started_at IS NOT NULL")
        late = (datetime.now(UTC) - last_due).total_seconds()
        if started >= expected or late > grace:
            return
        await asyncio.sleep(1)


async def lags(
    stores: Stores, first_due: datetime, due_from: datetime | None = None,
    due_to: datetime | None = None,
) -> tuple[list[float], list[float], int]:  # fmt: skip
    """(start lags, starts since first_due, executions due) for executions due in a window,
    in every group."""
    rows = await stores.concat(
        "SELECT due_at, started_at FROM executions "
        "WHERE ($1::timestamptz IS NULL OR due_at >= $1) "
        "AND ($2::timestamptz IS NULL OR due_at < $2)",
        due_from, due_to,
    )  # fmt: skip
    started = [r for r in rows if r["started_at"] is not None]
    return (
        [(r["started_at"] - r["due_at"]).total_seconds() for r in started],
        [(r["started_at"] - first_due).total_seconds() for r in started],
        len(rows),
    )


async def succeeded(stores: Stores) -> dict[str, int]:
    """Succeeded executions, per group."""
    return await stores.each("SELECT count(*) FROM executions WHERE status = 'succeeded'")


async def log_top_statements(stores: Stores) -> None:
    for group, top in (await stores.top_statements()).items():
        for calls, ms, query in top:
            log(f"statement {group:>6} {calls:8} calls {ms:9.0f} ms  {query}")


def processes(schedulers: int, groups: int, one_cluster: bool = False) -> str:
    where = "two databases of one PostgreSQL cluster" if one_cluster else "one cluster each"
    store = f"; the store over {groups} groups ({where})" if groups > 1 else ""
    return f"1 API, {schedulers} scheduler, 2 workers x 64{store}"


def result(
    scenario: str, expected: int, lag: list[float], starts: list[float], **kw: object
) -> Result:
    return Result(system="horae", scenario=scenario, expected=expected, started=len(lag),
                  lags=lag, starts=starts,
                  last_start_s=max(starts) if starts else math.nan, **kw)  # type: ignore[arg-type]  # fmt: skip


@dataclass
class SteadyLoad:
    """A fresh Horae system, ready, with a constant arrival rate planned from `first_due`
    (created through the API, each second's arrivals AHEAD seconds before it)."""

    system: System
    stores: Stores
    http: aiohttp.ClientSession
    arrivals: list[Arrival]
    first_due: datetime

    async def feed(self) -> None:
        await feed(self.http, self.arrivals)

    async def until(self, offset: float) -> None:
        """Sleep until `offset` seconds after the first due time."""
        await asyncio.sleep((self.first_due - datetime.now(UTC)).total_seconds() + offset)

    async def settle(self) -> None:
        await settle(self.stores, len(self.arrivals), self.arrivals[-1].due, grace=60)


@asynccontextmanager
async def steady_load(
    name: str, rate: int, seconds: int, *, schedulers: int, env: dict[str, str] | None = None,
    groups: int = 1, one_cluster: bool = False,
) -> AsyncIterator[SteadyLoad]:  # fmt: skip
    """1 API, `schedulers` schedulers and 2 workers x 64 handlers, with `env` on top, on a
    store of `groups` groups."""
    async with horae_system(name, groups, one_cluster=one_cluster) as system:
        system.env |= env or {}
        start_horae(system, schedulers=schedulers, workers=2, concurrency=64)
        stores = await Stores.open(system.groups)
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{PORT}") as http:
                await ready(stores, http, system)
                first_due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=4)
                yield SteadyLoad(system, stores, http, sustained(rate, seconds, first_due),
                                 first_due)  # fmt: skip
        finally:
            await stores.close()


async def run_sustained(
    rate: int, seconds: int, schedulers: int = 1, groups: int = 1, one_cluster: bool = False
) -> None:
    async with steady_load(
        "sustained", rate, seconds, schedulers=schedulers, groups=groups, one_cluster=one_cluster
    ) as load:
        system, stores, arrivals = load.system, load.stores, load.arrivals
        before = await stores.usage()
        cpu_before = cpu_snapshot(system.pids())
        log(f"sustained {rate}/s for {seconds}s from {load.first_due:%H:%M:%S}")
        watch, watching = PgWatch(stores, load.first_due), asyncio.Event()
        sampling = asyncio.create_task(watch.run(watching))
        try:
            await load.feed()
            await load.settle()
        finally:
            watching.set()
            await sampling
        cpu = cpu_delta(cpu_before, cpu_snapshot(system.pids()))
        done = await succeeded(stores)
        finished = sum(done.values())
        # the statements of the whole pipeline: create, dispatch, claim, record
        await asyncio.sleep(3)  # outcomes still being committed
        # each cluster's whole WAL: nothing else should run during a benchmark
        window = await stores.since(before)
        run_statements = sum(window.statements.values())
        wal = sum(window.wal_bytes.values())
        await log_top_statements(stores)
        lag, starts, _ = await lags(stores, load.first_due)
        peak = system.peak_rss_mib()
    per_group = figures(window, done)
    series = watch.per_second()
    for line in pgwatch.report(series, lag, starts):
        log(line)
    notes = (f"{processes(schedulers, groups, one_cluster)}; {finished} succeeded with full "
             f"history; "
             f"WAL {wal / max(1, finished) / 1024:.1f} KiB per execution; "
             f"{pgwatch.summary(series)}")  # fmt: skip
    if groups > 1:
        notes += f"; {summary(per_group)}"
    print(result("sustained", len(arrivals), lag, starts, rate=rate, peak_rss_mib=peak,
                 statements_per_execution=run_statements / max(1, finished), cpu_seconds=cpu,
                 notes=notes, groups=per_group, postgres=series).to_json(),
          flush=True)  # fmt: skip


@dataclass
class Spike:
    """One-offs created through the API, all due at `due`, and the system they run on."""

    system: System
    stores: Stores
    due: datetime
    cpu_before: dict[str, float]
    """CPU times (bench.load.cpu_snapshot) from before the jobs were created."""
    before: Usage
    """The clusters' statements, WAL and CPU from before the jobs were created."""


@asynccontextmanager
async def spike_load(count: int, lead: float, groups: int = 1) -> AsyncIterator[Spike]:
    """1 API, 1 scheduler and 2 workers x 64, on a store of `groups` groups; `count` jobs of
    10 tenants created `lead` seconds before the instant they are all due. Yields once they
    are created."""
    async with horae_system("top", groups) as system:
        start_horae(system, schedulers=1, workers=2, concurrency=64)
        stores = await Stores.open(system.groups)
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{PORT}") as http:
                await ready(stores, http, system)
                due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=lead)
                t0 = time.monotonic()
                before = await stores.usage()
                cpu_before = cpu_snapshot(system.pids())
                await create(http, top_of_hour(count, due))
                log(f"top: {count} created in {time.monotonic() - t0:.1f}s, all due "
                    f"{due:%H:%M:%S}")  # fmt: skip
            yield Spike(system, stores, due, cpu_before, before)
        finally:
            await stores.close()


async def run_top(count: int, lead: float, groups: int = 1) -> None:
    async with spike_load(count, lead, groups) as spike:
        system, stores, due = spike.system, spike.stores, spike.due
        await settle(stores, count, due, grace=120)
        cpu = cpu_delta(spike.cpu_before, cpu_snapshot(system.pids()))
        done = await succeeded(stores)
        await asyncio.sleep(3)  # outcomes still being committed
        per_group = figures(await stores.since(spike.before), done)
        lag, starts, _ = await lags(stores, due)
        peak = system.peak_rss_mib()
    notes = f"{processes(1, groups)}; created through the API {lead:.0f} s ahead"
    if groups > 1:
        notes += f"; {summary(per_group)}"
    print(result("top", count, lag, starts, count=count, peak_rss_mib=peak, cpu_seconds=cpu,
                 notes=notes, groups=per_group).to_json(), flush=True)  # fmt: skip


async def run_failover(rate: int, lease: float) -> None:
    """Two schedulers under a steady `rate`. At +20 s one is SIGKILLed and its process
    started again under the same identity, as the kubelet restarts a killed container in
    its pod (the chart sets HORAE_IDENTITY to the pod's name); at +45 s the other is
    SIGKILLed and a replica under a new name replaces it, as when its pod or node is lost;
    at +75 s both are restarted one after the other with SIGTERM (a rolling restart).
    Start lags of executions due in the 20 s after each event."""
    env = {"HORAE_LEASE_DURATION_SECONDS": str(lease)}
    async with steady_load("failover", rate, 105, schedulers=2, env=env) as load:
        system, stores = load.system, load.stores
        feeding = asyncio.create_task(load.feed())
        await load.until(20)
        killed_at = datetime.now(UTC)
        system.signal("scheduler-0", signal.SIGKILL)
        await asyncio.to_thread(system.wait, "scheduler-0")
        system.start("scheduler-0", "scheduler")
        log("scheduler-0 SIGKILLed; its container started again (same identity)")
        await load.until(45)
        replaced_at = datetime.now(UTC)
        system.signal("scheduler-1", signal.SIGKILL)
        system.start("scheduler-1b", "scheduler")
        log("scheduler-1 SIGKILLed; replaced by scheduler-1b (a new pod)")
        await load.until(75)
        rolled_at = datetime.now(UTC)
        for old, new in (("scheduler-0", "scheduler-0c"), ("scheduler-1b", "scheduler-1c")):
            # as a Deployment rolls: the old pod ends, its replacement becomes ready (here:
            # holds its share of the shards) before the next old pod is stopped
            system.signal(old, signal.SIGTERM)
            await asyncio.to_thread(system.wait, old)
            system.start(new, "scheduler")
            await owns_shards(stores, new)
            log(f"{old} stopped (SIGTERM), {new} started and holds shards")
        await feeding
        await load.settle()
        window = timedelta(seconds=20)
        events = (
            ("failover-kill", killed_at, "SIGKILL, its container restarted (same identity)"),
            ("failover-replaced", replaced_at, "SIGKILL, replaced by a new pod"),
            ("failover-rolling", rolled_at, "rolling SIGTERM restart"),
        )
        measured = [
            (name, what, await lags(stores, load.first_due, at, at + window))
            for name, at, what in events
        ]
        peak = system.peak_rss_mib()
    for name, what, (lag, starts, due) in measured:
        notes = (f"{what}: executions due in the 20 s after it; {rate}/s steady, "
                 f"2 schedulers, shard lease {lease:g} s")  # fmt: skip
        print(result(name, due, lag, starts, rate=rate, peak_rss_mib=peak, notes=notes).to_json(),
              flush=True)  # fmt: skip


async def run_worker_faults(rate: int, freeze: float) -> None:
    """Two workers under a steady `rate`: at +20 s one is SIGKILLed (and started again, as
    its Deployment would); at +45 s the other is frozen (SIGSTOP) for `freeze` seconds, then
    thawed. Start lags of executions due in the 20 s after each event (an execution a dead
    worker held is started again by another: its lag is its last attempt's)."""
    async with steady_load("worker-faults", rate, 80, schedulers=1) as load:
        system, stores = load.system, load.stores
        feeding = asyncio.create_task(load.feed())
        await load.until(20)
        killed_at = datetime.now(UTC)
        system.signal("worker-0", signal.SIGKILL)
        system.start("worker-0b", "worker", "--tasks", str(TASKS), "--concurrency", "64")
        log("worker-0 SIGKILLed; started again")
        await load.until(45)
        frozen_at = datetime.now(UTC)
        system.signal("worker-1", signal.SIGSTOP)
        log(f"worker-1 frozen (SIGSTOP) for {freeze:g} s")
        await asyncio.sleep(freeze)
        system.signal("worker-1", signal.SIGCONT)
        log("worker-1 thawed (SIGCONT)")
        await feeding
        await load.settle()
        window = timedelta(seconds=20)
        kill = await lags(stores, load.first_due, killed_at, killed_at + window)
        stop = await lags(stores, load.first_due, frozen_at, frozen_at + window)
        retried = await stores.sum("SELECT count(*) FROM executions WHERE attempt > 1")
        peak = system.peak_rss_mib()
    events = (("worker-kill", kill, "a worker SIGKILLed and started again"),
              ("worker-freeze", stop, f"a worker frozen (SIGSTOP) for {freeze:g} s"))  # fmt: skip
    for name, (lag, starts, due), event in events:
        notes = (f"executions due in the 20 s after {event}; {rate}/s steady, 1 scheduler, "
                 f"2 workers x 64; {retried} executions of the run had a second "
                 f"attempt")  # fmt: skip
        print(result(name, due, lag, starts, rate=rate, peak_rss_mib=peak, notes=notes).to_json(),
              flush=True)  # fmt: skip


async def drained(stores: Stores) -> None:
    """Until no execution is running."""
    while True:
        if not await stores.sum("SELECT count(*) FROM executions WHERE status = 'running'"):
            return
        await asyncio.sleep(0.5)


async def run_cron(jobs: int, seconds: int) -> None:
    """`jobs` cron jobs firing every second (10 tenants), created through the API; runs for
    `seconds` from their first fire time, then the scheduler is stopped (SIGTERM) and the
    runs it published finish. Every figure covers every run: start lags, CPU and WAL per
    execution, and how many of the jobs rows' updates were HOT (no index entry)."""
    async with horae_system("cron", 1) as system:
        start_horae(system, schedulers=1, workers=2, concurrency=64)
        stores = await Stores.open(system.groups)
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{PORT}") as http:
                await ready(stores, http, system)
                before = await stores.usage()
                cpu_before = cpu_snapshot(system.pids())
                await post_jobs(http, {
                    t: [{"task": "bench.noop", "cron": "* * * * * *", "payload": {"seq": i}}
                        for i in range(n, jobs, len(TENANTS))]
                    for n, t in enumerate(TENANTS)
                })  # fmt: skip
                first_due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
            log(f"cron: {jobs} jobs firing every second from {first_due:%H:%M:%S}")
            watch, watching = PgWatch(stores, first_due), asyncio.Event()
            sampling = asyncio.create_task(watch.run(watching))
            try:
                await asyncio.sleep((first_due - datetime.now(UTC)).total_seconds() + seconds)
                scheduler_cpu = cpu_snapshot(system.pids())["scheduler-0"]  # before it ends
                system.signal("scheduler-0", signal.SIGTERM)
                await asyncio.to_thread(system.wait, "scheduler-0")
                stopped = datetime.now(UTC)
                await asyncio.sleep(3)  # the last published runs: claimed
                await drained(stores)
            finally:
                watching.set()
                await sampling
            cpu = cpu_delta(
                cpu_before, cpu_snapshot(system.pids()) | {"scheduler-0": scheduler_cpu}
            )
            done = await succeeded(stores)
            finished = sum(done.values())
            await asyncio.sleep(1)  # the statistics of the last transactions
            window = await stores.since(before)
            wal = sum(window.wal_bytes.values())
            updates, hot = (await stores.concat(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'jobs'"
            ))[0]  # fmt: skip
            await log_top_statements(stores)
            # every run that started, and every one due 2 s before the scheduler stopped
            # (those due after it were not published) that did not
            lag, starts, _ = await lags(stores, first_due)
            missed = await stores.sum(
                "SELECT count(*) FROM executions WHERE started_at IS NULL AND due_at < $1",
                stopped - timedelta(seconds=2),
            )
            peak = system.peak_rss_mib()
        finally:
            await stores.close()
    series = watch.per_second()
    for line in pgwatch.report(series, lag, starts):
        log(line)
    notes = (f"{processes(1, 1)}; {jobs} cron jobs every second for {seconds} s; {finished} "
             f"succeeded; WAL {wal / max(1, finished) / 1024:.2f} KiB per execution; jobs rows "
             f"updated {updates:,} times, {hot:,} of them HOT; "
             f"{pgwatch.summary(series)}")  # fmt: skip
    print(result("cron", len(lag) + missed, lag, starts, rate=jobs, peak_rss_mib=peak,
                 statements_per_execution=sum(window.statements.values()) / max(1, finished),
                 cpu_seconds=cpu, notes=notes, groups=figures(window, done),
                 postgres=series).to_json(), flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", required=True,
                        choices=["sustained", "top", "failover", "worker-faults",
                                 "cron"])  # fmt: skip
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=int, default=120)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--lead", type=float, default=20.0)
    parser.add_argument("--lease", type=float, default=3.0, help="shard lease seconds")
    parser.add_argument("--freeze", type=float, default=10.0,
                        help="worker-faults: seconds the frozen worker stays stopped")  # fmt: skip
    parser.add_argument("--groups", type=int, choices=[1, 2], default=1,
                        help="store groups (2: the second on HORAE_SECOND_DATABASE_URL's "
                             "cluster, holding the odd shards); sustained and top")  # fmt: skip
    parser.add_argument("--one-cluster", action="store_true",
                        help="--groups 2 with the second group a database of the first "
                             "group's cluster: routing and split batches without a second "
                             "cluster's own costs; sustained only")  # fmt: skip
    args = parser.parse_args()
    if args.one_cluster and (args.groups != 2 or args.scenario != "sustained"):
        parser.error("--one-cluster: with --groups 2 and --scenario sustained only")
    if args.groups != 1 and args.scenario in ("failover", "worker-faults", "cron"):
        parser.error("--groups: sustained and top only")
    if args.scenario == "sustained":
        asyncio.run(run_sustained(args.rate, args.seconds, groups=args.groups,
                                  one_cluster=args.one_cluster))  # fmt: skip
    elif args.scenario == "top":
        asyncio.run(run_top(args.count, args.lead, args.groups))
    elif args.scenario == "failover":
        asyncio.run(run_failover(args.rate, args.lease))
    elif args.scenario == "cron":
        asyncio.run(run_cron(args.rate, args.seconds))
    else:
        asyncio.run(run_worker_faults(args.rate, args.freeze))


if __name__ == "__main__":
    main()

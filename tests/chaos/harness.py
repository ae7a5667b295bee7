"""One chaos run: private servers, 2 API / 3 scheduler / 3 worker / 2 operator processes,
a workload, a seeded fault schedule, quiescence, then the checker over the history.

Timeline: set up -> crons and ScheduledJobs -> fault phase (one-offs created at a steady
pace, faults injected) -> calm (every replica up, nothing injected) -> crons cancelled
-> wait until no execution is pending -> read the history and check it.
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from horae.models import shard_of
from horae.store.migrate import migrate
from horae.store.moves import add_group, move_shards
from tests.chaos import checker
from tests.chaos.faults import Cluster, Injector, group_plan, plan
from tests.chaos.partition import Partition
from tests.chaos.servers import Postgres, RabbitMQ
from tests.chaos.workload import ADMIN_TOKEN, TENANTS, ScheduledJobs, Workload, cron_promise
from tests.support.kube import ControlPlane, free_port
from tests.support.processes import Component, Processes
from tests.support.scheduling import holders
from tests.support.wait import until

TASKS = "tests/chaos/tasks.py"
OBSERVER = {"application_name": "chaos-observer"}
DUMPS = {
    "executions": "SELECT * FROM executions ORDER BY job_id, occurrence_at, attempt",
    "jobs": "SELECT * FROM jobs",
    "shard_epochs": "SELECT * FROM shard_epochs",
}


@dataclass(frozen=True)
class Settings:
    seed: int = 20261130
    duration: float = 120.0
    """Seconds of the fault phase (one-offs are created all along it)."""
    jobs: int = 3000
    """One-off jobs created during the fault phase."""
    lease: float = 6.0
    """Workers' execution lease (HORAE_EXECUTION_LEASE_SECONDS), shortened from 30 s."""
    scheduler_lease: float = 3.0
    calm: float = 12.0
    quiesce_timeout: float = 120.0
    lead: float = 0.0
    """HORAE_CHAOS_LEAD_SECONDS: every execution published this far ahead (the schedulers'
    HORAE_DISPATCH_LEAD_SECONDS) and claimed as it arrives, so that the faults meet the
    early path a burst takes (0: at the due moments, as a steady rate goes)."""

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        duration = float(env.get("HORAE_CHAOS_DURATION") or cls.duration)
        return cls(
            seed=int(env.get("HORAE_CHAOS_SEED") or cls.seed),
            duration=duration,
            jobs=int(env.get("HORAE_CHAOS_JOBS") or 25 * duration),  # 25 creates a second
            lead=float(env.get("HORAE_CHAOS_LEAD_SECONDS") or cls.lead),
        )


class Run:
    def __init__(self, cfg: Settings, plane: ControlPlane, namespace: str,
                 kubeconfigs: dict[str, Path], base: Path,
                 postgres: Postgres, rabbitmq: RabbitMQ,
                 second: Postgres | None = None) -> None:  # fmt: skip
        self.cfg = cfg
        self.second = second
        """With a second PostgreSQL, the store has two groups: `second` holds the odd shards."""
        self.urls = [postgres.url, *([second.url] if second else [])]
        self.moved: list[int] = []
        self.faults: list[checker.Fault] = []
        self.host: HostWatch | None = None
        self.promises: list[checker.Promise] = []
        self.main_shards = set(range(0, 64, 2) if second else range(64))
        self.plane = plane
        self.namespace = namespace
        self.base = base
        self.postgres = postgres
        self.rabbitmq = rabbitmq
        self.history_dir = base / "history"
        self.history_dir.mkdir(mode=0o777)
        self.history_dir.chmod(0o777)
        tokens = {tenant: f"chaos-token-{tenant}" for tenant in TENANTS}
        lines = [f"{t},{tenant}\n" for tenant, t in tokens.items()]
        # Tenant limits are an administrator's: a token with the `admin` verb sets them.
        lines.append(f"{ADMIN_TOKEN},chaos-admin,admin\n")
        (base / "tokens").write_text("".join(lines))
        self.tokens = tokens
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("HORAE_")},
            **plane.env,
            "HORAE_DATABASE_URL": postgres.url, "HORAE_BROKER_URL": rabbitmq.url,
            "HORAE_BROKER_PREFIX": "horae", "HORAE_NAMESPACE": namespace,
            "HORAE_LOG_LEVEL": os.environ.get("HORAE_CHAOS_LOG_LEVEL", "INFO"),
            "HORAE_API_TOKENS_FILE": str(base / "tokens"),
            "HORAE_EXECUTION_LEASE_SECONDS": str(cfg.lease),
            "HORAE_LEASE_DURATION_SECONDS": str(cfg.scheduler_lease),
            "HORAE_REDELIVERY_TIMEOUT_SECONDS": "10", "HORAE_SHUTDOWN_GRACE_SECONDS": "5",
            "HORAE_DISPATCH_LEAD_SECONDS": str(cfg.lead),
            "HORAE_OPERATOR_LEASE_SECONDS": "5", "HORAE_RESYNC_SECONDS": "20",
            "HORAE_DATABASE_POOL_SIZE": "8", "HORAE_CHAOS_HISTORY": str(self.history_dir),
            # the workers: a shared pool serving the API tenants and the ScheduledJobs'
            "HORAE_TENANTS": ",".join([namespace, *TENANTS]),
        }  # fmt: skip
        self.procs = Processes(env, base, command_env={
            c: {"KUBECONFIG": str(p)} for c, p in kubeconfigs.items()})  # fmt: skip
        self.api_ports = [free_port(), free_port()]
        roles = ("api", "scheduler", "worker", "operator")
        self.replicas: dict[str, list[Component]] = {r: [] for r in roles}
        self.samples: list[checker.Sample] = []
        self.withdrawn: frozenset[tuple[str, float]] = frozenset()
        self.partition: Partition | None = None

    # ---- processes -------------------------------------------------------------------
    def start(self, role: str, wrapper: tuple[str, ...] = (),
              env: dict[str, str] | None = None) -> Component:  # fmt: skip
        if role == "api":
            used = {int(c.args[-1]) for c in self.replicas["api"]}
            port = next(p for p in self.api_ports if p not in used)
            args = ["api", "--port", str(port)]
        elif role == "worker":
            args = ["worker", "--tasks", TASKS, "--concurrency", "32"]
        else:
            args = [role]
        component = self.procs.start(role, *args, env=env, wrapper=wrapper)
        self.replicas[role].append(component)
        return component

    async def bring_up(self) -> None:
        for role, count in (("operator", 2), ("scheduler", 3), ("api", 2), ("worker", 3)):
            for _ in range(count):
                self.start(role)
        async with httpx.AsyncClient() as http:
            for port in self.api_ports:

                async def up(port: int = port) -> bool:
                    try:
                        return (await http.get(f"http://127.0.0.1:{port}/readyz")).is_success
                    except httpx.TransportError:
                        return False

                await until(up, timeout=60, interval=0.2, what=f"the API on {port}")

        async def shards_held() -> bool:
            held = await asyncio.to_thread(holders, self.plane, self.namespace)
            return sum(len(s) for h, s in held.items() if h) == 64

        await until(shards_held, timeout=60, interval=0.5, what="all 64 shards held")

    def apiserver_port(self) -> int:
        server = self.plane.kubectl("config", "view", "--minify", "-o",
                                    "jsonpath={.clusters[0].cluster.server}").stdout  # fmt: skip
        return int(server.rsplit(":", 1)[1].strip("/"))

    async def partitioned(self, seconds: float) -> str:
        """A fourth scheduler in the network namespace takes its share of the shards, is
        cut off for `seconds` (its Leases expire, the others take over and fence it),
        then rejoins and stops. Returns its identity."""
        assert self.partition is not None
        comp = self.procs.start("scheduler", "scheduler", wrapper=self.partition.wrapper)

        async def holds() -> bool:
            return bool((await asyncio.to_thread(holders, self.plane, self.namespace))
                        .get(comp.identity))  # fmt: skip

        try:
            await until(holds, timeout=30, interval=0.5, what="the cut-off scheduler's shards")
        except AssertionError:
            pass  # cut it off anyway: its member Lease is enough to unsettle the others
        await asyncio.to_thread(self.partition.cut)
        try:
            await asyncio.sleep(seconds)
        finally:
            await asyncio.to_thread(self.partition.heal)
        await asyncio.sleep(2)  # it wakes up believing it owns shards: fencing's moment
        await asyncio.to_thread(comp.stop, 30)
        return comp.identity

    def close(self) -> None:
        if self.host is not None:
            self.host.stop()
        self.procs.stop_all()
        if self.partition is not None:
            self.partition.destroy()

    # ---- observation -----------------------------------------------------------------
    async def observe(self, stop: asyncio.Event) -> None:
        """Sample Postgres all along: epochs and running counts often (executions counted
        once whichever groups hold them), terminal statuses every few seconds. A sample
        that fails (Postgres restarting) is skipped."""
        conns: dict[str, asyncpg.Connection] = {}
        tick = 0
        seen: dict[str, str] = {}
        while not stop.is_set():
            try:
                now = time.time()
                epochs: dict[int, int] = {}
                running: dict[str, set[str]] = {}
                terminal: dict[str, str] = {}
                for g, url in enumerate(self.urls):  # each group's shards keyed apart
                    conn = conns.get(url)
                    if conn is None or conn.is_closed():
                        conn = conns[url] = await asyncpg.connect(
                            url, timeout=5, server_settings=OBSERVER
                        )
                    for r in await conn.fetch("SELECT shard, epoch FROM shard_epochs"):
                        epochs[g * 10_000 + r[0]] = r[1]
                    # By id: a move's rows are in both groups from the target's commit to
                    # the source's (the source's fenced and locked), one execution each.
                    for r in await conn.fetch(
                        "SELECT tenant, id::text FROM executions WHERE status = 'running'"
                    ):  # fmt: skip
                        running.setdefault(r[0], set()).add(r[1])
                    if tick % 6 == 0:  # kept: only what is new or changed since the last look
                        for r in await conn.fetch(
                            "SELECT id, status::text FROM executions "
                            "WHERE status NOT IN ('scheduled', 'queued', 'running')"
                        ):  # fmt: skip
                            key = str(r[0])
                            if seen.get(key) != r[1]:
                                terminal[key] = seen[key] = r[1]
                counts = {tenant: len(ids) for tenant, ids in running.items()}
                self.samples.append(checker.Sample(now, terminal, epochs, counts))
                tick += 1
            except Exception:  # Postgres restarting, the connection cut: skip this sample
                for conn in conns.values():
                    conn.terminate()
                conns = {}
            try:
                await asyncio.wait_for(stop.wait(), timeout=0.5)
            except TimeoutError:
                pass
        for conn in conns.values():
            await conn.close()

    async def _db(self, url: str | None = None) -> asyncpg.Connection:
        async def connect() -> asyncpg.Connection | None:
            try:
                return await asyncpg.connect(url or self.postgres.url, timeout=5,
                                             server_settings=OBSERVER)  # fmt: skip
            except (OSError, asyncpg.PostgresError, TimeoutError):
                return None

        return await until(connect, timeout=60, interval=0.5, what="Postgres")

    async def crd_jobs_acked(self, names: list[str]) -> dict[str, tuple[str, float]]:
        """name -> (job id, when first seen in the store): a ScheduledJob's promise starts
        once the operator stored it."""
        seen: dict[str, tuple[str, float]] = {}
        conns = [await self._db(url) for url in self.urls]
        try:

            async def stored() -> bool:
                for conn in conns:
                    rows = await conn.fetch(
                        "SELECT name, id FROM jobs WHERE source = 'crd' AND name = ANY($1) "
                        "AND state = 'active'", names)  # fmt: skip
                    for row in rows:
                        seen.setdefault(row["name"], (str(row["id"]), time.time()))
                return len(seen) == len(names)

            await until(stored, timeout=60, interval=0.2, what="ScheduledJobs stored")
        finally:
            for conn in conns:
                await conn.close()
        return seen

    async def pending(self) -> int:
        total = 0
        for url in self.urls:
            conn = await self._db(url)
            try:
                total += int(await conn.fetchval(
                    "SELECT count(*) FROM executions WHERE status IN ('scheduled', 'queued', "
                    "'running')"))  # fmt: skip
            finally:
                await conn.close()
        return total

    async def final(self) -> dict[str, str]:
        statuses: dict[str, str] = {}
        withdrawn: set[tuple[str, float]] = set()
        for g, url in enumerate(self.urls):
            conn = await self._db(url)
            try:  # the store's last word, kept beside the history for a post-mortem
                for name, query in DUMPS.items():
                    out = self.base / (f"{name}.csv" if g == 0 else f"{name}-group{g}.csv")
                    await conn.copy_from_query(query, output=str(out), format="csv",
                                               header=True)  # fmt: skip
                rows = await conn.fetch("SELECT id, status::text FROM executions")
                statuses.update((str(r[0]), r[1]) for r in rows)
                gone = await conn.fetch(
                    "SELECT job_id, occurrence_at FROM executions WHERE attempt = 1 "
                    "AND status = 'cancelled' AND error_kind = 'cancelled'")  # fmt: skip
                withdrawn |= {(str(r[0]), round(r[1].timestamp(), 3)) for r in gone}
            finally:
                await conn.close()
        self.withdrawn = frozenset(withdrawn)
        return statuses

    def invocations(self) -> list[checker.Invocation]:
        events: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
        for path in sorted(self.history_dir.glob("*.jsonl")):
            for line in path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by SIGKILL
                events.setdefault((entry["execution_id"], entry["pid"]), {})[entry["event"]] = entry
        out = []
        for seen in events.values():
            start = seen.get("start")
            if start is None:
                continue
            end = seen.get("end") or seen.get("fail") or seen.get("stopped")
            out.append(checker.Invocation(
                start["execution_id"], start["job_id"], start["attempt"],
                start["occurrence_at"], start["due_at"], start["tenant"], start["worker"],
                start["at"], end["at"] if end else None, "fail" in seen,
            ))  # fmt: skip
        return out

    # ---- the run ---------------------------------------------------------------------
    async def go(self) -> tuple[checker.Report, str]:
        cfg = self.cfg
        await migrate(self.postgres.url)
        if self.second is not None:
            await add_group(self.postgres.url, "second", self.second.url)
            await move_shards(self.postgres.url, list(range(1, 64, 2)), "second")
        await self.bring_up()
        rng = random.Random(cfg.seed)
        workload = Workload([f"http://127.0.0.1:{p}" for p in self.api_ports], self.tokens,
                            rng, self.base / "promises.jsonl")  # fmt: skip
        await workload.set_limits()
        await workload.start_crons()
        acked = {job: p for job, p in ((j, time.time()) for j, _, _ in workload.crons)}
        crds = ScheduledJobs(self.plane, self.namespace)
        await asyncio.to_thread(crds.apply)
        crd_acked = await self.crd_jobs_acked(crds.names())

        made = await asyncio.to_thread(Partition.create, [
            self.postgres.port, self.rabbitmq.port, self.apiserver_port()])  # fmt: skip
        cluster = Cluster(self.replicas, self.start, self.postgres, self.rabbitmq,
                          second=self.second, move=self.move_quarter)  # fmt: skip
        if isinstance(made, Partition):
            self.partition = made
            cluster.partition = self.partitioned
        else:
            cluster.partition_skipped = made
        injector = Injector(cluster)
        schedule = (
            group_plan(cfg.duration) if self.second is not None
            else plan(cfg.seed, cfg.duration, lease=cfg.lease,
                      scheduler_lease=cfg.scheduler_lease)
        )  # fmt: skip
        stop_observing = asyncio.Event()
        observer = asyncio.create_task(self.observe(stop_observing))
        self.host = host = HostWatch()
        began = time.time()
        await asyncio.gather(workload.one_offs(cfg.jobs, cfg.duration),
                             injector.run(schedule, began))  # fmt: skip
        await injector.heal()
        faults_ended = time.time()
        await asyncio.sleep(cfg.calm)
        await workload.stop_crons(acked)
        crd_cancelled = await asyncio.to_thread(crds.delete)
        for name, (job, seen_at) in crd_acked.items():
            step = int(name.split("-")[-1].rstrip("s"))
            workload.promises.append(cron_promise(job, self.namespace, step, seen_at,
                                                  crd_cancelled))  # fmt: skip

        quiet_from = time.time()

        async def quiet() -> bool:
            try:
                return await self.pending() == 0
            except AssertionError:
                return False

        try:
            await until(quiet, timeout=cfg.quiesce_timeout, interval=1, what="quiescence")
        except AssertionError:  # what is left is reported as stuck; what each waits on:
            for c in self.procs.started:
                if c.name in ("scheduler", "worker"):
                    c.signal(signal.SIGUSR1)  # every task's stack into its log
            await asyncio.sleep(1)
        quiesced_in = time.time() - quiet_from
        stop_observing.set()
        await observer
        host.stop()
        self.faults = [*injector.faults, *host.stalls]
        history = checker.History(
            workload.promises, self.invocations(), self.faults, self.samples,
            await self.final(), {t: n for t, n in TENANTS.items() if n is not None}, cfg.lease,
            self.withdrawn,
        )  # fmt: skip
        report = checker.check(history)
        self.promises = list(workload.promises)
        header = [
            f"seed {cfg.seed}, fault phase {cfg.duration:.0f} s, {len(schedule)} faults planned, "
            f"one-offs {cfg.jobs} sent ({workload.unacknowledged} unacknowledged), "
            f"crons {len(workload.crons)} API + {len(crd_acked)} ScheduledJobs",
            f"faults ended {faults_ended - began:.0f} s in; quiescent {quiesced_in:.0f} s "
            "after the crons were cancelled",
            *(f"skipped fault: {s}" for s in sorted(set(injector.skipped))),
        ]
        text = "\n".join(header) + "\n" + report.format()
        (self.base / "report.txt").write_text(text)
        (self.base / "faults.jsonl").write_text(
            "".join(json.dumps(f.__dict__) + "\n" for f in self.faults)
        )
        return report, text

    def parts_failed(self) -> list[str]:
        """Each process's long-running part that ended on its own (`horae.supervise`: the
        process stopped itself), as "identity: message", from the processes' logs."""
        return [
            f"{c.identity}: {json.loads(line)['msg']}"
            for c in self.procs.started
            for line in c.log().splitlines()
            if '"logger": "horae.supervise"' in line
        ]

    async def move_quarter(self) -> str:
        """Move 16 of the first group's 32 shards to the second, under load."""
        shards = sorted(self.main_shards)[:16]
        started = time.time()
        await move_shards(self.postgres.url, shards, "second")
        self.moved = shards
        self.main_shards -= set(shards)
        return f"shards {shards} to second in {time.time() - started:.2f} s"

    def untouched_group_lags(self, faults: Iterable[checker.Fault]) -> list[float]:
        """Start lags of the first group's executions due while the second group was down:
        shards it held throughout (none moved then), tenants without a limit. (A limited
        tenant's allowance in each group is rebalanced only while every group answers: one
        whose allowance the down group held waits for it, docs/operations.md.)"""
        down = [f for f in faults if f.kind == "group_down"]
        return checker.first_run_lags(
            self.invocations(),
            lambda i: (
                any(f.start + 1 <= i.due_at <= f.end for f in down)
                and shard_of(uuid.UUID(i.job_id), 64) in self.main_shards
                and TENANTS.get(i.tenant) is None
            ),
        )

    def post_mortem(self, report: checker.Report) -> str:
        return post_mortem(report, self.base, ((c.identity, c.log()) for c in self.procs.started))


def post_mortem(report: checker.Report, base: Path, logs: Iterable[tuple[str, str]],
                limit: int = 400) -> str:  # fmt: skip
    """What explains each lost occurrence, printed with a failure (CI keeps only the output):
    the faults by wall-clock time, the lost jobs' rows as the store last had them, their
    shards' epochs, and every process's log lines about those jobs or shards, merged in
    time order."""
    jobs = sorted({m for line in report.lost for m in re.findall(r"job ([0-9a-f-]{36})", line)})
    if not jobs:
        return ""
    shards = {str(shard_of(uuid.UUID(j), 64)) for j in jobs}
    out = ["----- post-mortem of the lost occurrences", "faults (UTC):"]
    faults = [json.loads(line) for line in _read(base / "faults.jsonl").splitlines() if line]
    for f in sorted(faults, key=lambda f: f["start"]):
        out.append(f"  {_utc(f['start'])} - {_utc(f['end'])} {f['kind']} {f['target']} "
                   f"{f.get('detail', '')}".rstrip())  # fmt: skip
    out.append("executions of the lost jobs (the store's last word): " + ", ".join(COLUMNS))
    out += [f"  {', '.join(row.get(c, '') for c in COLUMNS)}"
            for row in _csv(base / "executions.csv") if row["job_id"] in jobs]  # fmt: skip
    out.append(f"epochs of shards {', '.join(sorted(shards, key=int))}:")
    out += [f"  {row}" for row in _csv(base / "shard_epochs.csv") if row["shard"] in shards]
    needles = [*jobs, *(f'"shard": {s}}}' for s in shards)]
    lines = sorted(
        (m.group(1) if (m := TS.search(line)) else "", f"{name}: {line[:600]}")
        for name, log in logs for line in log.splitlines() if any(n in line for n in needles)
    )  # fmt: skip
    out.append(f"log lines about them ({len(lines)}; the first {limit}):")
    out += [f"  {text}" for _, text in lines[:limit]]
    return "\n".join(out)


class HostWatch:
    """A process of its own that notices the machine itself stalling: it sleeps TICK at a
    time and records a `checker.HOST_STALL` whenever it woke `checker.STALL_SECONDS` late
    or more. (A process, so the harness's own event loop or GIL being busy is no stall.)"""

    TICK = 0.05
    SCRIPT = (
        "import sys, time\n"
        "while True:\n"
        "    wall, before = time.time(), time.monotonic()\n"
        "    time.sleep({tick})\n"
        "    late = time.monotonic() - before - {tick}\n"
        "    if late >= {stall}:\n"
        "        print(wall, late, flush=True)\n"
    )

    def __init__(self) -> None:
        script = self.SCRIPT.format(tick=self.TICK, stall=checker.STALL_SECONDS)
        self._proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                      text=True)  # fmt: skip
        self.stalls: list[checker.Fault] = []

    def stop(self) -> None:
        if self._proc.returncode is not None:
            return
        self._proc.kill()
        out, _ = self._proc.communicate()
        for line in out.splitlines():
            wall, late = map(float, line.split())
            end = wall + self.TICK + late
            self.stalls.append(
                checker.Fault(checker.HOST_STALL, "host", wall, end, f"{late:.2f} s")
            )


COLUMNS = ("job_id", "id", "occurrence_at", "attempt", "status", "due_at", "enqueued_at",
           "dispatch_epoch", "started_at", "finished_at", "lease_owner", "error_kind")  # fmt: skip
TS = re.compile(r'"ts": "([^"]+)"')


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(_read(path).splitlines()))


def _utc(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S.%f")[:-3]

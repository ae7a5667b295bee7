"""The chart's RBAC is exactly enough: for every verb it grants, a component run as a
ServiceAccount whose role lacks just that verb fails at something it must do.

(The other e2e tests run every component under the full roles and show they are enough.)
Each case names the effect that goes missing; `test_each_exercise_succeeds_with_the_full_roles`
shows the same effects do happen with the chart's roles, so no case passes vacuously.
The cases run on several control planes at once (`outcomes`); the tests report them.
"""

from __future__ import annotations

import asyncio
import os
import queue
import subprocess
import traceback
import uuid
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
import yaml

from horae.models import JobSource, JobSpec
from horae.store.groups import MAIN
from tests.conftest import BASE_DB, SPLIT
from tests.support.chart import (
    INSTALL_NAMESPACE,
    bind_lease_roles,
    chart_cluster_roles,
    install_chart_accounts,
)
from tests.support.db_roles import LoginRoles
from tests.support.groups import (
    SECOND,
    SECOND_DB,
    SplitTemplate,
    copy_split_store,
    create_database,
    drop_database,
    with_path,
)
from tests.support.kube import (
    ControlPlane,
    apply_crds,
    free_port,
    jobs_editor_token,
    leave_no_horae_resources,
    service_account_kubeconfig,
    start_control_plane,
    stop_control_plane,
)
from tests.support.processes import Component, Processes
from tests.support.store_rows import StoreRows
from tests.support.wait import until, until_ready, until_serving

SJ = ("scheduledjobs", "workerpools", "backfills")
STATUS = ("scheduledjobs/status", "workerpools/status", "backfills/status")
LEASES = ("leases",)

# ClusterRole -> the component that runs under it, and how the chart binds it.
ROLES = {
    "horae-operator": ("operator", "cluster"),
    "horae-operator-leader": ("operator", "namespace"),
    "horae-scheduler": ("scheduler", "namespace"),
    "horae-api": ("api", "cluster"),
}


@dataclass
class Ctx:
    plane: ControlPlane
    namespace: str
    processes: Processes
    stored: StoreRows
    kubeconfig: Path  # the component under test runs with this

    def start(self, command: str, *args: str, reduced: bool, **env: str) -> Component:
        extra = {"KUBECONFIG": str(self.kubeconfig)} if reduced else {}
        return self.processes.start(command, command, *args, env={**env, **extra})

    def apply(self, manifest: dict[str, Any]) -> None:
        self.plane.kubectl("apply", "-n", self.namespace, "-f", "-",
                           input=yaml.safe_dump(manifest))  # fmt: skip

    def get(self, *args: str) -> Any:
        return self.plane.get_json(*args, "-n", self.namespace)


def scheduledjob(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "horae.dev/v1alpha1", "kind": "ScheduledJob",
            "metadata": {"name": name}, "spec": {"task": "e2e.echo", **spec}}  # fmt: skip


async def happens(probe: Callable[[], Awaitable[Any]], within: float) -> bool:
    """Whether `probe` turns truthy within `within` seconds."""
    try:
        await until(probe, timeout=within, interval=0.5)
    except AssertionError:
        return False
    return True


OPERATOR_ENV = {"HORAE_OPERATOR_LEASE_SECONDS": "10", "HORAE_RESYNC_SECONDS": "1",
                "HORAE_AUTOSCALE_PERIOD_SECONDS": "1"}  # fmt: skip
"""A 10 s leader Lease (renewed within 6.7 s) for what is not about the Lease: with 3 s,
an operator starved of CPU for 2 s (cases run at once) gave its Lease up and exited."""


# -- exercises: each returns whether the effect it needs happened ----------------------------


async def reconciles(ctx: Ctx, reduced: bool) -> bool:
    """A ScheduledJob is stored and its status says Ready."""
    await leading_operator(ctx, reduced, **OPERATOR_ENV)
    ctx.apply(scheduledjob("probe", schedule="0 0 1 1 *"))

    async def ready() -> bool:
        status = ctx.get("sj", "probe").get("status", {})
        return any(c["type"] == "Ready" and c["status"] == "True"
                   for c in status.get("conditions", []))  # fmt: skip

    return await happens(ready, 8)


def leader(ctx: Ctx) -> str | None:
    """Who holds the operator's leader Lease."""
    leases = ctx.get("leases")["items"]
    found = [x["spec"] for x in leases if x["metadata"]["name"] == "horae-operator"]
    return found[0].get("holderIdentity") if found else None


async def leading_operator(ctx: Ctx, reduced: bool, **env: str) -> Component:
    """An operator started and, unless it cannot, leading: an exercise's window counts
    from the lead, not from the start (a CPU-starved start took most of an 8 s window in CI,
    so the finalizer came after it). Waits at most 20 s, and not once the operator exits:
    one that cannot take the Lease has its window all the same."""
    operator = ctx.start("operator", reduced=reduced, **env)

    async def leads_or_exited() -> bool:
        return not operator.alive() or leader(ctx) == operator.identity

    await happens(leads_or_exited, 20)
    return operator


async def watches_resources(ctx: Ctx, reduced: bool) -> bool:
    """kopf lists and watches its resources and the CRDs without a permission error from
    when the operator leads to 6 s later. (It copes without them by listing again and
    again, so only its log shows the damage.)"""
    operator = ctx.start("operator", reduced=reduced, **OPERATOR_ENV)
    ctx.apply(scheduledjob("watched", schedule="0 0 1 1 *"))

    async def leads() -> bool:
        return leader(ctx) == operator.identity

    await until(leads, timeout=20, what="the operator leading")

    async def refused() -> bool:
        return "forbidden" in operator.log().lower()

    return not await happens(refused, 6)


async def guards_deletion(ctx: Ctx, reduced: bool) -> bool:
    """The operator puts its finalizer on a ScheduledJob, so deletion waits for the store."""
    await leading_operator(ctx, reduced, **OPERATOR_ENV)
    ctx.apply(scheduledjob("guarded", schedule="0 0 1 1 *"))

    async def finalized() -> bool:
        meta = ctx.get("sj", "guarded")["metadata"]
        return "horae.dev/finalizer" in meta.get("finalizers", [])

    return await happens(finalized, 8)


async def resync_cancels_orphans(ctx: Ctx, reduced: bool) -> bool:
    """A store job whose ScheduledJob does not exist is cancelled by the resync pass."""
    ghost = await ctx.stored.create_job(JobSpec(task="e2e.echo", cron="0 0 1 1 *"),
                                        tenant=ctx.namespace, source=JobSource.CRD,
                                        now=datetime.now(UTC), name="ghost")  # fmt: skip
    await leading_operator(ctx, reduced, **OPERATOR_ENV)

    async def cancelled() -> bool:
        state = await ctx.stored.fetchval("SELECT state::text FROM jobs WHERE id = $1", ghost)
        return bool(state == "cancelled")

    return await happens(cancelled, 12)


async def keeps_leading(ctx: Ctx, reduced: bool) -> bool:
    """The operator keeps renewing its leader Lease (a leader that cannot exits)."""
    operator = ctx.start("operator", reduced=reduced,
                         **{**OPERATOR_ENV, "HORAE_OPERATOR_LEASE_SECONDS": "3"})  # fmt: skip

    async def exited() -> bool:
        return not operator.alive()

    return not await happens(exited, 10)  # over three Lease durations


async def hands_over_at_once(ctx: Ctx, reduced: bool) -> bool:
    """A standby operator takes the leader Lease within 2 s of the leader's clean stop: it
    watches the Lease (without the watch it would wait for its next poll, 10 s here)."""
    env = {**OPERATOR_ENV, "HORAE_OPERATOR_LEASE_SECONDS": "30"}
    first = ctx.start("operator", reduced=False, **env)

    async def leads(identity: str) -> bool:
        return leader(ctx) == identity

    await until(lambda: leads(first.identity), timeout=20, what="the first operator leading")
    port = free_port()
    second = ctx.start("operator", reduced=reduced, HORAE_METRICS_PORT=str(port), **env)

    # Stop the leader right after the standby's first look at the Lease.
    assert await until_ready(port) == "standing by"
    first.stop()
    return await happens(lambda: leads(second.identity), 2)


async def warns_on_invalid_specs(ctx: Ctx, reduced: bool) -> bool:
    """An invalid spec gets a Warning Event."""
    await leading_operator(ctx, reduced, **OPERATOR_ENV)
    ctx.apply(scheduledjob("bad", schedule="5-1 * * * *"))  # passes the CRD, not the operator

    async def warned() -> bool:
        events = ctx.get("events", "--field-selector", "involvedObject.name=bad")["items"]
        return any(e["reason"] == "InvalidSpec" for e in events)

    return await happens(warned, 12)


async def _runs(ctx: Ctx, reduced: bool, **spec: Any) -> None:
    ctx.start("scheduler", reduced=False)
    ctx.start("worker", "--tasks", "tests/e2e/tasks.py", reduced=False)
    # The mirror is opt-in; the chart's grants on Execution mirrors are its (chart_rbac).
    await leading_operator(ctx, reduced, HORAE_EXECUTION_MIRROR="1", **OPERATOR_ENV)
    ctx.apply(scheduledjob("ticker", **spec))


def _mirrors(ctx: Ctx) -> list[dict[str, Any]]:
    return list(ctx.get("executions.horae.dev", "-l", "horae.dev/job=ticker")["items"])


async def mirrors_executions(ctx: Ctx, reduced: bool) -> bool:
    """Execution resources appear for a job that runs."""
    await _runs(ctx, reduced, schedule="* * * * * *")

    async def some() -> bool:
        return bool(_mirrors(ctx))

    return await happens(some, 15)


async def mirrors_follow_progress(ctx: Ctx, reduced: bool) -> bool:
    """A mirror written while its execution runs is updated when it succeeds."""
    await _runs(ctx, reduced, task="e2e.slow", schedule="*/3 * * * * *", payload={"seconds": 2})

    async def succeeded() -> bool:
        return any(m["status"]["status"] == "Succeeded" for m in _mirrors(ctx))

    return await happens(succeeded, 15)


async def prunes_mirrors(ctx: Ctx, reduced: bool) -> bool:
    """Mirrors are pruned to historyLimit: the one mirror shown gives way to a newer run's.
    (Counting one mirror after a few runs passed without delete too, once: an operator that
    came up late mirrored only the newest run, and had nothing to delete yet.)"""
    await _runs(ctx, reduced, schedule="* * * * * *", historyLimit=1)

    def names() -> list[str]:
        return [m["metadata"]["name"] for m in _mirrors(ctx)]

    async def first() -> str | None:
        return min(names(), default=None)

    shown = await until(first, timeout=20, what="a first mirror")

    async def pruned() -> bool:
        now = names()
        return len(now) == 1 and now[0] != shown

    return await happens(pruned, 10)


async def deletes_mirrors_with_the_job(ctx: Ctx, reduced: bool) -> bool:
    """Deleting the ScheduledJob deletes its mirrors."""
    await _runs(ctx, reduced, schedule="* * * * * *")

    async def some() -> bool:
        return bool(_mirrors(ctx))

    await until(some, timeout=15, what="a first mirror")
    ctx.plane.kubectl("delete", "sj", "ticker", "-n", ctx.namespace, "--wait=false")

    async def none() -> bool:
        return not _mirrors(ctx)

    return await happens(none, 10)


def workerpool(min_replicas: int = 1) -> dict[str, Any]:
    return {"apiVersion": "horae.dev/v1alpha1", "kind": "WorkerPool",
            "metadata": {"name": f"wp{uuid.uuid4().hex[:6]}"},
            "spec": {"image": "horae-worker:test", "tasks": "examples.demo",
                     "minReplicas": min_replicas, "maxReplicas": 4}}  # fmt: skip


async def _gets_its_deployment(ctx: Ctx, reduced: bool, pool: dict[str, Any]) -> bool:
    await leading_operator(ctx, reduced, **OPERATOR_ENV)
    ctx.apply(pool)

    async def deployed() -> bool:
        found = ctx.plane.kubectl("get", "deployment", pool["metadata"]["name"], "-n",
                                  ctx.namespace, check=False)  # fmt: skip
        return found.returncode == 0

    return await happens(deployed, 12)


async def runs_pools(ctx: Ctx, reduced: bool) -> bool:
    """A WorkerPool gets its Deployment."""
    return await _gets_its_deployment(ctx, reduced, workerpool())


async def runs_pools_as_a_marked_account(ctx: Ctx, reduced: bool) -> bool:
    """A WorkerPool naming a ServiceAccount marked for workers gets its Deployment."""
    ctx.plane.kubectl("create", "serviceaccount", "workers", "-n", ctx.namespace)
    ctx.plane.kubectl("label", "serviceaccount", "workers", "-n", ctx.namespace,
                      "horae.dev/worker=true")  # fmt: skip
    pool = workerpool()
    pool["spec"]["serviceAccountName"] = "workers"
    return await _gets_its_deployment(ctx, reduced, pool)


async def scales_pools(ctx: Ctx, reduced: bool) -> bool:
    """A WorkerPool's Deployment is scaled to its minReplicas."""
    await leading_operator(ctx, reduced, **OPERATOR_ENV)
    pool = workerpool(min_replicas=2)
    ctx.apply(pool)

    async def scaled() -> bool:
        found = ctx.plane.kubectl("get", "deployment", pool["metadata"]["name"], "-n",
                                  ctx.namespace, "-o", "jsonpath={.spec.replicas}",
                                  check=False)  # fmt: skip
        return found.stdout.strip() == "2"

    return await happens(scaled, 12)


async def holds_shards(ctx: Ctx, reduced: bool) -> bool:
    """A lone scheduler takes all 64 shard Leases and keeps renewing its member Lease (which
    keeps them its own)."""
    scheduler = ctx.start("scheduler", reduced=reduced)

    def held() -> int:
        leases = ctx.get("leases", "-l", "horae.dev/shard-lease")["items"]
        return sum(x["spec"].get("holderIdentity") == scheduler.identity for x in leases)

    def member() -> str | None:
        leases = ctx.get("leases", "-l", "horae.dev/scheduler-member")["items"]
        mine = [x for x in leases if x["spec"].get("holderIdentity") == scheduler.identity]
        return mine[0]["metadata"]["resourceVersion"] if mine else None

    async def all_held() -> bool:
        return held() == 64

    if not await happens(all_held, 10):
        return False
    before = member()

    async def renewed() -> bool:
        return member() not in (None, before) and held() == 64

    return await happens(renewed, 5)  # renewals come every second


async def watches_leases(ctx: Ctx, reduced: bool) -> bool:
    """The scheduler's Lease watch stays open (it wakes the lease loop at once on changes):
    it opened before the scheduler took its member Lease, and has not failed 3 s later."""
    scheduler = ctx.start("scheduler", reduced=reduced)

    async def member() -> bool:
        return bool(ctx.get("leases", "-l", "horae.dev/scheduler-member")["items"])

    await until(member, timeout=20, what="the member Lease")

    async def failed() -> bool:
        return "lease watch" in scheduler.log()

    return not await happens(failed, 3)


async def leaves_on_sigterm(ctx: Ctx, reduced: bool) -> bool:
    """A scheduler stopped with SIGTERM deletes its member Lease (peers rebalance at once)."""
    scheduler = ctx.start("scheduler", reduced=reduced)

    async def member() -> bool:
        return bool(ctx.get("leases", "-l", "horae.dev/scheduler-member")["items"])

    await until(member, timeout=15, what="the member Lease")
    scheduler.stop()
    return not ctx.get("leases", "-l", "horae.dev/scheduler-member")["items"]


async def serves_callers(ctx: Ctx, reduced: bool) -> bool:
    """A caller with a valid token and the jobs-editor role lists its jobs."""
    token = jobs_editor_token(ctx.plane, ctx.namespace)
    port = free_port()
    ctx.start("api", "--port", str(port), reduced=reduced)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        await until_serving(http)
        response = await http.get("/jobs", headers={"Authorization": f"Bearer {token}"})
    return response.status_code == 200


# (ClusterRole, resources of the rule, verb) -> the exercise whose effect needs it.
CASES: dict[tuple[str, tuple[str, ...], str], Callable[[Ctx, bool], Awaitable[bool]]] = {
    ("horae-operator", SJ, "list"): reconciles,
    ("horae-operator", SJ, "watch"): watches_resources,
    ("horae-operator", SJ, "patch"): guards_deletion,
    ("horae-operator", SJ, "get"): resync_cancels_orphans,
    ("horae-operator", STATUS, "patch"): reconciles,
    ("horae-operator", ("executions",), "list"): mirrors_executions,
    ("horae-operator", ("executions",), "create"): mirrors_executions,
    ("horae-operator", ("executions",), "patch"): mirrors_follow_progress,
    ("horae-operator", ("executions",), "delete"): prunes_mirrors,
    ("horae-operator", ("executions",), "deletecollection"): deletes_mirrors_with_the_job,
    ("horae-operator", ("serviceaccounts",), "get"): runs_pools_as_a_marked_account,
    ("horae-operator", ("deployments",), "get"): runs_pools,
    ("horae-operator", ("deployments",), "create"): runs_pools,
    ("horae-operator", ("deployments",), "patch"): runs_pools,
    ("horae-operator", ("deployments/scale",), "patch"): scales_pools,
    ("horae-operator", ("customresourcedefinitions",), "list"): watches_resources,
    ("horae-operator", ("customresourcedefinitions",), "watch"): watches_resources,
    ("horae-operator", ("events",), "create"): warns_on_invalid_specs,
    ("horae-operator-leader", LEASES, "list"): reconciles,
    ("horae-operator-leader", LEASES, "create"): reconciles,
    ("horae-operator-leader", LEASES, "update"): keeps_leading,
    ("horae-operator-leader", LEASES, "watch"): hands_over_at_once,
    ("horae-scheduler", LEASES, "list"): holds_shards,
    ("horae-scheduler", LEASES, "create"): holds_shards,
    ("horae-scheduler", LEASES, "update"): holds_shards,
    ("horae-scheduler", LEASES, "watch"): watches_leases,
    ("horae-scheduler", LEASES, "delete"): leaves_on_sigterm,
    ("horae-api", ("tokenreviews",), "create"): serves_callers,
    ("horae-api", ("subjectaccessreviews",), "create"): serves_callers,
}


def test_every_verb_the_chart_grants_has_a_case(control_plane: ControlPlane) -> None:
    granted = {
        (name, tuple(rule["resources"]), verb)
        for name, role in chart_cluster_roles(control_plane).items()
        if name in ROLES
        for rule in role["rules"]
        for verb in rule["verbs"]
    }
    assert granted == set(CASES)


def account_without(
    plane: ControlPlane, namespace: str, role: str, resources: tuple[str, ...], verb: str,
    path: Path, roles: dict[str, dict[str, Any]],
) -> Path:  # fmt: skip
    """A fresh ServiceAccount with the component's chart roles (`roles`), `verb` removed from
    the rule on `resources` of `role`; bound the way the chart binds them."""
    component = ROLES[role][0]
    account = f"rbac-{uuid.uuid4().hex[:8]}"
    plane.kubectl("create", "serviceaccount", account, "-n", INSTALL_NAMESPACE)
    for name, (owner, scope) in ROLES.items():
        if owner != component:
            continue
        copy = {**roles[name], "metadata": {"name": f"{account}-{name}"}}
        if name == role:
            copy["rules"] = [
                {**rule, "verbs": [v for v in rule["verbs"] if v != verb]}
                if tuple(rule["resources"]) == resources else rule
                for rule in copy["rules"]
            ]  # fmt: skip
            copy["rules"] = [rule for rule in copy["rules"] if rule["verbs"]]
        plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(copy))
        subject = f"--serviceaccount={INSTALL_NAMESPACE}:{account}"
        if scope == "cluster":
            plane.kubectl("create", "clusterrolebinding", copy["metadata"]["name"],
                          f"--clusterrole={copy['metadata']['name']}", subject)  # fmt: skip
        else:
            plane.kubectl("create", "rolebinding", copy["metadata"]["name"], "-n", namespace,
                          f"--clusterrole={copy['metadata']['name']}", subject)  # fmt: skip
    return service_account_kubeconfig(plane, INSTALL_NAMESPACE, account, path)


# -- running the cases: on several control planes at once ----------------------------------
#
# A case spends most of its time waiting out an effect that must not happen, so cases run
# at once, in lanes: each lane runs its cases one after another as the tests did, each with
# its own namespace, store, broker prefix and processes. The operator's cases need a control
# plane per lane (operators watch the whole cluster, and would act on each other's objects
# in one); the scheduler's and the API's act in their own namespace only, and share the
# session's plane in a lane of their own. The tests below only report each case's outcome.

LANES = 3
"""Control planes the operator's cases run on at once: the session's and two of this
module's own."""


@dataclass(frozen=True)
class Case:
    """An exercise run under the chart's roles with `verb` removed from the rule on
    `resources` of `role` or, with no `role`, under the chart's roles."""

    exercise: Callable[[Ctx, bool], Awaitable[bool]]
    role: str = ""
    resources: tuple[str, ...] = ()
    verb: str = ""

    @property
    def component(self) -> str:
        roles = [self.role] if self.role else [r for (r, _, _), e in CASES.items()
                                               if e is self.exercise]  # fmt: skip
        return ROLES[roles[0]][0]


@dataclass
class Outcome:
    happened: bool
    error: str = field(repr=False)  # the traceback of an exercise that raised
    dump: str = field(repr=False)  # the processes' logs


@dataclass(frozen=True)
class Shared:
    """What every case's set-up needs from the session."""

    template_db: str
    split: SplitTemplate | None  # the split run's (tests/conftest.py `split`)
    login_roles: LoginRoles
    broker_url: str
    roles: dict[str, dict[str, Any]]  # the chart's ClusterRoles


@dataclass
class Lane:
    plane: ControlPlane
    kubeconfigs: dict[str, Path]  # the chart's accounts (tests/conftest.py)
    base: Path


async def run_case(case: Case, lane: Lane, shared: Shared) -> Outcome:
    """`case` as the tests/conftest.py fixtures set a test up: a fresh store (split, in the
    split run), namespace and broker prefix, its components as their database roles and
    the chart's accounts."""
    plane, key = lane.plane, uuid.uuid4().hex[:10]
    db_url = with_path(BASE_DB, f"horae_t_{key}")
    urls = {MAIN: db_url}
    if shared.split is not None:
        urls[SECOND] = await copy_split_store(BASE_DB, f"horae_t_{key}", f"horae_g_{key}",
                                              shared.split)  # fmt: skip
    else:
        await create_database(BASE_DB, f"horae_t_{key}", shared.template_db)
    namespace = f"t-{key}"
    plane.kubectl("create", "namespace", namespace)
    bind_lease_roles(plane, namespace)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HORAE_")},
        **plane.env,
        "HORAE_DATABASE_URL": db_url, "HORAE_BROKER_URL": shared.broker_url,
        "HORAE_BROKER_PREFIX": f"t{key}", "HORAE_NAMESPACE": namespace,
        "HORAE_LOG_LEVEL": "INFO",
    }  # fmt: skip
    command_env = {c: {"HORAE_DATABASE_URL": u}
                   for c, u in shared.login_roles.urls(db_url).items()}  # fmt: skip
    for component, path in lane.kubeconfigs.items():
        command_env[component]["KUBECONFIG"] = str(path)
    logs = lane.base / namespace
    logs.mkdir()
    processes = Processes(env, logs, command_env=command_env)
    stored = await StoreRows.open(urls)
    happened, error = False, ""
    try:
        kubeconfig = Path("/nonexistent")
        if case.role:
            kubeconfig = account_without(plane, namespace, case.role, case.resources, case.verb,
                                         logs / "reduced.kubeconfig", shared.roles)  # fmt: skip
        ctx = Ctx(plane, namespace, processes, stored, kubeconfig)
        happened = await case.exercise(ctx, bool(case.role))
    except Exception:
        error = traceback.format_exc()
    finally:
        processes.kill_all()
        await stored.close()
        leave_no_horae_resources(plane, namespace)
        for group, url in urls.items():
            await drop_database(BASE_DB if group == MAIN else SECOND_DB, url.rsplit("/", 1)[1])
    return Outcome(happened, error, processes.dump())


def run_lane(lane: Lane | None, base: Path, queues: list[queue.Queue[Case]], shared: Shared,
             outcomes: dict[Case, Outcome]) -> None:  # fmt: skip
    """Run cases from `queues` (the first that has any) until none is left, on `lane` or
    (None) on a control plane of its own, started in `base`. In a thread, with its own
    event loop: one lane's blocking kubectl calls hold up no other."""

    def next_case() -> Case | None:
        for cases in queues:
            try:
                return cases.get_nowait()
            except queue.Empty:
                continue
        return None

    async def go(lane: Lane) -> None:
        while (case := next_case()) is not None:
            outcomes[case] = await run_case(case, lane, shared)

    if lane is not None:
        asyncio.run(go(lane))
        return
    plane = None
    try:
        plane = start_control_plane(base / "k8s")
        apply_crds(plane)
        accounts = base / "accounts"
        accounts.mkdir()
        own = Lane(plane, install_chart_accounts(plane, accounts), base)
    except (RuntimeError, AssertionError, subprocess.SubprocessError) as failed:
        # A control plane of its own that did not come up (seen once in a clean run; its
        # kubectl error was not kept) costs time, not outcomes: the session's lane takes
        # every queue, this lane's cases too. Said in the run's warnings summary.
        warnings.warn(f"an RBAC lane's own control plane did not start: {failed}", stacklevel=1)
        if plane is not None:
            stop_control_plane(plane)
        return
    try:
        asyncio.run(go(own))
    finally:
        stop_control_plane(plane)


NEEDED = "test_each_verb_the_chart_grants_is_needed"
SUFFICE = "test_each_exercise_succeeds_with_the_full_roles"


@pytest.fixture(scope="module")
def split_stores(request: pytest.FixtureRequest) -> SplitTemplate | None:
    """What the cases' stores are copies of in the split run, as tests/conftest.py `split`
    gives it to every e2e test."""
    if not SPLIT:
        return None
    request.getfixturevalue("second_cluster_roles")
    template: SplitTemplate = request.getfixturevalue("split_template_db")
    return template


@pytest_asyncio.fixture(scope="module")
async def outcomes(
    request: pytest.FixtureRequest, control_plane: ControlPlane,
    component_kubeconfigs: dict[str, Path], template_db: str, login_roles: LoginRoles,
    broker_url: str, split_stores: SplitTemplate | None,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[Case, Outcome]:  # fmt: skip
    """The outcome of every case the session selected from this module, run in lanes."""
    selected: list[Case] = []
    for item in request.session.items:
        params = getattr(item, "callspec", None)
        if item.module is not request.module or params is None:
            continue
        if item.originalname == NEEDED:
            role, resources, verb = (params.params[k] for k in ("role", "resources", "verb"))
            selected.append(Case(CASES[(role, resources, verb)], role, resources, verb))
        elif item.originalname == SUFFICE:
            selected.append(Case(params.params["exercise"]))
    shared = Shared(template_db, split_stores, login_roles, broker_url,
                    chart_cluster_roles(control_plane))  # fmt: skip
    operators: queue.Queue[Case] = queue.Queue()
    others: queue.Queue[Case] = queue.Queue()
    for case in selected:
        (operators if case.component == "operator" else others).put(case)
    results: dict[Case, Outcome] = {}
    own = [tmp_path_factory.mktemp("lane") for _ in range(min(LANES, operators.qsize()) - 1)]
    session = Lane(control_plane, component_kubeconfigs, tmp_path_factory.mktemp("lane"))
    side = Lane(control_plane, component_kubeconfigs, tmp_path_factory.mktemp("lane"))
    both = [operators, others]
    await asyncio.gather(
        asyncio.to_thread(run_lane, session, session.base, both, shared, results),
        asyncio.to_thread(run_lane, side, side.base, [others], shared, results),
        *(asyncio.to_thread(run_lane, None, base, both, shared, results) for base in own),
    )
    return results


def outcome_of(outcomes: dict[Case, Outcome], case: Case) -> Outcome:
    found = outcomes[case]
    print(found.dump)  # shown by pytest only when the test failed
    assert not found.error, found.error
    return found


@pytest.mark.timeout(900)  # the first test runs every case (`outcomes`)
@pytest.mark.parametrize(
    ("role", "resources", "verb"), list(CASES),
    ids=[f"{r.removeprefix('horae-')}:{','.join(res)}:{v}" for r, res, v in CASES],
)  # fmt: skip
def test_each_verb_the_chart_grants_is_needed(
    outcomes: dict[Case, Outcome], role: str, resources: tuple[str, ...], verb: str
) -> None:
    exercise = CASES[(role, resources, verb)]
    found = outcome_of(outcomes, Case(exercise, role, resources, verb))
    assert not found.happened, f"{exercise.__doc__} without {verb} on {resources}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "exercise", sorted(set(CASES.values()), key=lambda e: e.__name__),
    ids=lambda e: e.__name__,
)  # fmt: skip
def test_each_exercise_succeeds_with_the_full_roles(
    outcomes: dict[Case, Outcome], exercise: Callable[[Ctx, bool], Awaitable[bool]]
) -> None:
    assert outcome_of(outcomes, Case(exercise)).happened, exercise.__doc__

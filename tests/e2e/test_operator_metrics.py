"""The operator's own metrics as Prometheus scrapes them from a real operator process:
reconciles by result, the execution mirrors' lag and the autoscaler's decisions move with
what users do, and nothing is counted as failed."""

from __future__ import annotations

from collections.abc import Callable

from horae.broker import Names
from tests.e2e.test_operator import manifest as scheduledjob
from tests.e2e.test_workerpool import manifest as workerpool
from tests.support.kube import ControlPlane, free_port
from tests.support.metrics import Samples, scrape, value
from tests.support.processes import Processes
from tests.support.queues import backlog
from tests.support.wait import until, until_ready


def reconciles(samples: Samples, result: str, kind: str = "ScheduledJob") -> float:
    return value(samples, "horae_operator_reconciles_total", kind=kind, result=result)


async def test_reconciles_refusals_mirror_lag_and_scaling_show_in_the_operators_metrics(
    control_plane: ControlPlane,
    namespace: str,
    processes: Processes,
    broker_url: str,
    broker_prefix: str,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    processes.start(
        "operator",
        "operator",
        env={
            "HORAE_METRICS_PORT": str(port),
            "HORAE_AUTOSCALE_PERIOD_SECONDS": "0.5",
            "HORAE_EXECUTION_MIRROR": "1",
        },
    )  # fmt: skip  (the opt-in mirror reports its lag)
    processes.start("scheduler", "scheduler")
    processes.start("worker", "worker", "--tasks", "tests/e2e/tasks.py")
    assert await until_ready(port) == "leading"

    async def scraped(check: Callable[[Samples], bool], what: str, timeout: float) -> Samples:
        """The first scrape that passes `check`."""

        async def passing() -> Samples | None:
            samples = await scrape(url)
            return samples if samples and check(samples) else None

        return await until(passing, timeout=timeout, what=what)

    before = await scraped(lambda s: True, "the operator's metrics", 10)
    assert value(before, "horae_shards") == 64
    assert (reconciles(before, "ok"), reconciles(before, "refused")) == (0, 0)

    # A ScheduledJob stored: one reconcile ok; its executions, mirrored: the lag observed.
    control_plane.kubectl("apply", "-f", "-", input=scheduledjob(namespace, "*/2 * * * * *"))
    await scraped(lambda s: reconciles(s, "ok") >= 1, "a reconcile ok", 20)
    mirrored = await scraped(
        lambda s: value(s, "horae_operator_mirror_lag_seconds_count") >= 2,
        "executions mirrored, their lag observed",
        30,
    )
    assert value(mirrored, "horae_operator_mirror_lag_seconds_sum") > 0

    # One it refuses (the schedule's range runs backwards): counted refused, not error.
    bad = scheduledjob(namespace, "5-1 * * * *").replace("name: ticker", "name: backwards")
    control_plane.kubectl("apply", "-f", "-", input=bad)
    await scraped(lambda s: reconciles(s, "refused") >= 1, "a reconcile refused", 20)

    # A WorkerPool's backlog: the autoscaler scales its Deployment up.
    control_plane.kubectl("apply", "-f", "-", input=workerpool(namespace, "crunchers", """
  image: registry.example/shop-workers:1.0
  tasks: shop.tasks
  minReplicas: 1
  maxReplicas: 4
  targetBacklogPerReplica: 100
"""))  # fmt: skip
    # (Twice: spec.replicas filled in by the operator is a spec change it reconciles too.)
    await scraped(lambda s: reconciles(s, "ok", "WorkerPool") >= 1, "the pool reconciled", 20)
    await backlog(broker_url, Names(broker_prefix).pool_queue(namespace, "crunchers"), 400)
    after = await scraped(
        lambda s: value(s, "horae_operator_scale_decisions_total", direction="up") >= 1,
        "a scale-up counted",
        20,
    )

    assert reconciles(after, "error") == reconciles(after, "error", "WorkerPool") == 0
    parts = ("status-mirror", "execution-mirrors", "autoscaler", "resync")
    failures = {part: value(after, "horae_operator_errors_total", part=part) for part in parts}
    assert failures == dict.fromkeys(parts, 0.0)
    assert value(after, "horae_operator_reconcile_seconds_count", kind="ScheduledJob") >= 2

"""Two namespaces, each with a WorkerPool of the same name serving the same task: each
namespace's executions run on its own pool's workers only, and a forged message naming
the other namespace's execution is refused (dead-lettered with its reason, never run)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import aio_pika

from horae import broker
from horae.models import ExecutionBatch, ExecutionMessage, JobSource, JobSpec
from horae.operator.workerpool import Pool, WorkerPoolSpec, deployment_body
from horae.store import jobs
from tests.support.invocations import invocations
from tests.support.processes import Processes
from tests.support.store_rows import StoreRows
from tests.support.wait import until

TASKS = "tests/e2e/tasks.py"
TEAMS = ("team-a", "team-b")
POOL = "reports"


def operator_env(namespace: str) -> dict[str, str]:
    """What the operator puts in the environment of the WorkerPool `reports` of `namespace`."""
    spec = WorkerPoolSpec(image="img", tasks=TASKS)
    pool = Pool(namespace=namespace, name=POOL, uid="uid", spec=spec)
    container = deployment_body(pool)["spec"]["template"]["spec"]["containers"][0]
    # Each pod has its own network; here both workers share one: no fixed metrics port.
    return {e["name"]: e["value"] for e in container["env"]} | {"HORAE_METRICS_PORT": "0"}


async def consumed(broker_url: str, queue: str) -> bool:
    connection = await aio_pika.connect(broker_url)
    try:
        declared = await (await connection.channel()).declare_queue(queue, passive=True)
        return bool(declared.declaration_result.consumer_count)
    except aio_pika.exceptions.ChannelClosed:
        return False  # not declared yet
    finally:
        await connection.close()


async def create(stored: StoreRows, tenant: str, count: int, due_in: timedelta) -> list:
    now = datetime.now(UTC)
    spec = JobSpec(task="e2e.echo", run_at=now + due_in)
    new = [jobs.NewJob(spec=spec, tenant=tenant, source=JobSource.API) for _ in range(count)]
    await stored.create(new, now=now)
    return await stored.fetch(
        "SELECT * FROM executions WHERE job_id = ANY($1::uuid[])", [j.job_id for j in new]
    )


async def test_each_namespace_runs_only_on_its_own_pool_and_forged_messages_are_refused(
    processes: Processes, stored: StoreRows, broker_url: str, broker_prefix: str, tmp_path: Path
) -> None:
    names = broker.Names(broker_prefix)
    log = tmp_path / "calls.jsonl"
    workers = {
        team: processes.start(
            f"worker-{team}",
            "worker",
            "--tasks",
            TASKS,
            env={**operator_env(team), "HORAE_TEST_LOG": str(log)},
        )
        for team in TEAMS
    }
    for team in TEAMS:
        queue = names.pool_queue(team, POOL)
        assert queue == f"{broker_prefix}.pool.{team}.{POOL}"
        await until(lambda q=queue: consumed(broker_url, q), timeout=30, what=f"{queue} consumed")
    processes.start("scheduler", "scheduler")
    rows = {team: await create(stored, team, 20, timedelta(seconds=2)) for team in TEAMS}

    async def all_succeeded() -> bool:
        done = "SELECT count(*) FROM executions WHERE status = 'succeeded'"
        return await stored.count(done) == 40

    await until(all_succeeded, timeout=60, what="both namespaces' executions to succeed")
    for team in TEAMS:
        ids = [r["id"] for r in rows[team]]
        owners = await stored.fetch(
            "SELECT lease_owner FROM executions WHERE id = ANY($1::uuid[])", ids
        )
        assert {o["lease_owner"] for o in owners} == {workers[team].identity}, team
    calls = invocations(log)
    assert len(calls) == 40
    assert all(c["worker"] == workers[c["tenant"]].identity for c in calls)

    # Forged: team-a's pending execution published straight to team-b's queue, once naming
    # its tenant truthfully and once lying that it is team-b's.
    [victim] = await create(stored, "team-a", 1, timedelta(minutes=10))  # beyond the preload
    forged = {
        "truthful": "team-a",
        "lying": "team-b",
    }
    connection = await aio_pika.connect(broker_url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        for message_id, tenant in forged.items():
            execution = ExecutionMessage(
                execution_id=victim["id"],
                job_id=victim["job_id"],
                task="e2e.echo",
                tenant=tenant,
                due_at=victim["due_at"],
                occurrence_at=victim["occurrence_at"],
                attempt=1,
            )
            body = ExecutionBatch(executions=[execution])
            await channel.default_exchange.publish(
                aio_pika.Message(body.model_dump_json().encode(), message_id=message_id),
                routing_key=names.pool_queue("team-b", POOL),
            )
        dlq = await channel.declare_queue(names.dead_letter_queue, passive=True)
        letters: dict[str, dict] = {}

        async def dead_lettered() -> bool:
            while (msg := await dlq.get(no_ack=True, fail=False)) is not None:
                letters[str(msg.message_id)] = dict(msg.headers)
            return set(letters) == set(forged)

        await until(dead_lettered, timeout=30, what="both forged messages dead-lettered")
    finally:
        await connection.close()
    assert {m: h["reason"] for m, h in letters.items()} == {m: "foreign-tenant" for m in forged}
    assert "team-a" in str(letters["lying"]["error"])
    after = await stored.fetchrow("SELECT * FROM executions WHERE id = $1", victim["id"])
    assert dict(after) == dict(victim), "a refused execution's row is left untouched"
    assert str(victim["id"]) not in {c["execution_id"] for c in invocations(log)}
    assert all(w.alive() for w in workers.values())

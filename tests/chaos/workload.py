"""The load generator: jobs created through the real HTTP API (and a few ScheduledJobs
through the kube-apiserver); every acknowledged create is logged as a promise.

A create counts as promised only once the API answered 201. Half of the one-off creates
carry an Idempotency-Key and are retried (against either API replica) until answered;
the others are sent once, and one that fails is not promised (it may still run).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from tests.chaos.checker import Promise
from tests.support.kube import ControlPlane

TENANTS = {"t-free": None, "t-capped": 12, "t-tight": 3}
ADMIN_TOKEN = "chaos-token-admin"
"""A static token with the `admin` verb: tenant limits are an administrator's."""
"""Tenants and their `max_running` limits (None: unlimited). The limited ones are loaded
so that they hit their limits at times without building a lasting backlog: `t-tight`
gets only quick jobs."""
RETRY = {"max_attempts": 10, "initial_interval_seconds": 0.5, "max_interval_seconds": 2}
CRON_STEPS = (2, 3, 5)


@dataclass
class Workload:
    apis: list[str]
    tokens: dict[str, str]
    rng: random.Random
    log: Path
    promises: list[Promise] = field(default_factory=list)
    unacknowledged: int = 0
    crons: list[tuple[str, str, int]] = field(default_factory=list)
    """(job id, tenant, step seconds) of the API cron jobs, cancelled at the end."""

    def _promise(self, promise: Promise) -> None:
        self.promises.append(promise)
        with self.log.open("a") as f:
            f.write(json.dumps(promise.__dict__) + "\n")

    async def _post(self, http: httpx.AsyncClient, tenant: str, body: dict[str, Any],
                    key: str | None, deadline: float) -> str | None:  # fmt: skip
        headers = {"Authorization": f"Bearer {self.tokens[tenant]}", "Horae-Tenant": tenant}
        if key:
            headers["Idempotency-Key"] = key
        attempt = 0
        while True:
            api = self.apis[(attempt + self.rng.randrange(2)) % len(self.apis)]
            attempt += 1
            try:
                answer = await http.post(f"{api}/jobs", json=body, headers=headers, timeout=10)
                if answer.status_code in (200, 201):  # 200: a retry replayed by its key
                    return str(answer.json()["id"])
                if answer.status_code < 500 and answer.status_code != 409:
                    raise AssertionError(f"create refused: {answer.status_code} {answer.text}")
            except httpx.TransportError:
                pass
            if key is None or time.time() > deadline:
                return None
            await asyncio.sleep(0.3)

    async def set_limits(self) -> None:
        async with httpx.AsyncClient() as http:
            for tenant, limit in TENANTS.items():
                if limit is None:
                    continue
                headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
                answer = await http.put(f"{self.apis[0]}/tenants/{tenant}", headers=headers,
                                        json={"max_running": limit}, timeout=10)  # fmt: skip
                assert answer.status_code == 200, answer.text

    async def start_crons(self) -> None:
        """Cron jobs with a seconds field, one per tenant and step."""
        async with httpx.AsyncClient() as http:
            for tenant in TENANTS:
                for step in CRON_STEPS:
                    # Every fire time is owed through faults of tens of seconds: catch-up All.
                    body = {
                        "task": "chaos.quick",
                        "cron": f"*/{step} * * * * *",
                        "retry": RETRY,
                        "catch_up": "All",
                        "catch_up_window_seconds": 3600,
                    }
                    job = await self._post(http, tenant, body, str(uuid.uuid4()),
                                           time.time() + 30)  # fmt: skip
                    assert job is not None, "a cron job could not be created before any fault"
                    self.crons.append((job, tenant, step))

    async def stop_crons(self, acked: dict[str, float]) -> float:
        """Cancel the cron jobs; promise their fire times in (acknowledged, cancelled - 5 s]."""
        cancelled = time.time()
        async with httpx.AsyncClient() as http:
            for job, tenant, step in self.crons:
                headers = {"Authorization": f"Bearer {self.tokens[tenant]}"}
                status, text = 0, "no answer"
                for attempt in range(10):  # a 503 (a connection the last fault cut) is retried
                    url = f"{self.apis[attempt % len(self.apis)]}/jobs/{job}"
                    try:
                        answer = await http.delete(url, headers=headers, timeout=10)
                    except httpx.TransportError as exc:
                        status, text = 0, repr(exc)
                    else:
                        status, text = answer.status_code, answer.text
                        if status != 503:
                            break
                    await asyncio.sleep(1)
                assert status == 204, text
                self._promise(cron_promise(job, tenant, step, acked[job], cancelled))
        return cancelled

    async def one_offs(self, count: int, duration: float) -> None:
        """`count` one-off jobs created at an even pace over `duration` seconds, each due
        2-15 s after its create."""
        sem = asyncio.Semaphore(16)
        started = time.monotonic()
        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=32)) as http:

            async def create(i: int) -> None:
                async with sem:
                    await self._one_off(http, i)

            tasks = []
            for i in range(count):
                delay = started + duration * i / count - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(create(i)))
            await asyncio.gather(*tasks)

    async def _one_off(self, http: httpx.AsyncClient, i: int) -> None:
        rng = self.rng
        tenant = rng.choices(list(TENANTS), weights=(70, 25, 5))[0]
        kind = rng.choices(["quick", "flaky", "slow", "slow-bounded"], weights=(70, 15, 8, 7))[0]
        if tenant == "t-tight":
            kind = "quick"
        run_at = datetime.now(UTC) + timedelta(seconds=rng.uniform(2, 15))
        body: dict[str, Any] = {"task": "chaos.quick", "run_at": run_at.isoformat(),
                                "retry": RETRY}  # fmt: skip
        if kind == "flaky":
            body |= {"task": "chaos.flaky", "payload": {"fail_times": rng.randint(1, 2)}}
        elif kind.startswith("slow"):
            body |= {"task": "chaos.slow", "payload": {"seconds": round(rng.uniform(2, 9), 1)}}
            if kind == "slow-bounded":  # a timeout: acked after the outcome, not at claim
                body["timeout_seconds"] = 60
        key = str(uuid.uuid4()) if i % 2 == 0 else None
        job = await self._post(http, tenant, body, key, time.time() + 20)
        if job is None:
            self.unacknowledged += 1
            return
        self._promise(Promise(job, tenant, kind, (run_at.timestamp(),), time.time()))


def cron_promise(job: str, tenant: str, step: int, acked: float, cancelled: float) -> Promise:
    """Fire times of `*/step * * * * *` strictly after the acknowledgement, up to 5 s
    before the cancel; every multiple of `step` may run (a later one is not a phantom)."""
    first = (int(acked) // step + 1) * step
    owed = tuple(float(t) for t in range(first, int(cancelled - 5) + 1, step))
    valid = tuple(float(t) for t in range(first - 60 * step, int(cancelled) + 600, step))
    return Promise(job, tenant, f"cron */{step}s", owed, acked, valid)


SCHEDULED_JOB = """
apiVersion: horae.dev/v1alpha1
kind: ScheduledJob
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  task: chaos.quick
  schedule: "*/{step} * * * * *"
  catchUp: {{policy: All, window: 1h}}
  retryPolicy: {{maxAttempts: 10, initialIntervalSeconds: 0.5, maxIntervalSeconds: 2}}
"""


@dataclass
class ScheduledJobs:
    """A few cron ScheduledJobs, so the operators carry part of the promise."""

    plane: ControlPlane
    namespace: str
    steps: tuple[int, ...] = (2, 4)

    def names(self) -> list[str]:
        return [f"chaos-every-{s}s" for s in self.steps]

    def apply(self) -> None:
        for name, step in zip(self.names(), self.steps, strict=True):
            self.plane.kubectl("apply", "-f", "-", input=SCHEDULED_JOB.format(
                name=name, namespace=self.namespace, step=step))  # fmt: skip

    def delete(self) -> float:
        cancelled = time.time()
        for name in self.names():
            self.plane.kubectl("delete", "scheduledjob", name, "-n", self.namespace,
                               "--wait=false")  # fmt: skip
        return cancelled

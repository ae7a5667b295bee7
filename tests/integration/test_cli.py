"""The real `horae` command against a real database."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import yaml

from horae.models import JobSource, JobSpec
from tests.support.processes import HORAE, REPO
from tests.support.store_rows import StoreRows
from tests.support.wait import until


def horae(
    *args: str, db_url: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({"HORAE_DATABASE_URL": db_url} if db_url else {}), **(env or {})}
    return subprocess.run([HORAE, *args], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=60, check=False)  # fmt: skip


def horae_each(
    commands: Iterable[tuple[str, ...]], db_url: str | None = None
) -> list[subprocess.CompletedProcess[str]]:
    """`horae` run with each of `commands`, a few at once: each is a Python start-up."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda args: horae(*args, db_url=db_url), commands))


def test_schedule_preview_prints_utc_and_local_fire_times() -> None:
    r = horae("schedule", "preview", "30 1 * * *", "--tz", "America/New_York", "-n", "2",
              "--after", "2026-10-31T12:00:00Z")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "2026-11-01T05:30:00Z  2026-11-01T01:30:00-04:00",
        "2026-11-02T06:30:00Z  2026-11-02T01:30:00-05:00",
    ]


def test_bad_cli_input_is_one_line_and_exit_code_2() -> None:
    cases = {
        ("schedule", "preview", "61 * * * *"): "horae: CRON: invalid cron '61 * * * *'",
        ("schedule", "preview", "* * * * *", "--tz", "Mars/X"): "horae: --tz: unknown time zone",
        ("schedule", "preview", "* * * * *", "-n", "0"): "horae: --count must be between",
        ("schedule", "preview", "* * * * *", "--after", "yesterday"): "horae: --after:",
        ("schedule", "preview", "* * * * *", "--after", "9999-12-31T23:59:00Z"): "horae: --after: "
        "must be from 1970-01-01T00:00:00Z to before 9000-01-01T00:00:00Z",
        ("executions", "not-a-ref"): "horae: JOB must be a job id or NAMESPACE/NAME",
        ("executions", "ns/name", "--status", "great"): "horae: --status must be one of",
        ("explain", "not-a-ref"): "horae: JOB must be a job id or NAMESPACE/NAME",
        ("explain", "ns/name", "--at", "yesterday"): "horae: --at: not an RFC 3339 instant",
    }
    for (args, start), r in zip(cases.items(), horae_each(cases), strict=True):
        assert r.returncode == 2, (args, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(start), (args, r.stderr)


def test_tenant_limits_are_set_and_listed(db_url: str) -> None:
    r = horae("tenants", "set", "acme", "--max-running", "5", db_url=db_url)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (
        "acme: max_running=5 running=0 max_jobs=100000 jobs=0 max_fires_per_minute=100000"
        " fires_per_minute=0"
    )
    r = horae("tenants", "ls", db_url=db_url)
    assert r.stdout.strip() == (
        "acme\tmax_running=5\trunning=0\tmax_jobs=100000\tjobs=0\tmax_fires_per_minute=100000"
        "\tfires_per_minute=0"
    )
    bad = horae("tenants", "set", "acme", "--max-running", "0", db_url=db_url)
    assert bad.returncode == 2 and bad.stderr.startswith("horae: --max-running must be >= 1")


def test_bad_settings_stop_a_component_with_one_line_naming_the_variable() -> None:
    cases = [
        ("HORAE_DEAD_WEBHOOK_URL", "ftp://alerts", "horae: HORAE_DEAD_WEBHOOK_URL: expected an "
         "http(s) URL, got 'ftp://alerts'"),
        ("HORAE_CONCURRENCY", "many", "horae: HORAE_CONCURRENCY: expected an integer"),
        ("HORAE_DISPATCH_LEAD_SECONDS", "30", "horae: HORAE_DISPATCH_LEAD_SECONDS: must be at "
         "most 10, got '30'"),
        ("HORAE_DISPATCH_LEAD_SECONDS", "-1", "horae: HORAE_DISPATCH_LEAD_SECONDS: must be >= 0, "
         "got '-1'"),
    ]  # fmt: skip
    for name, value, start in cases:
        r = subprocess.run([HORAE, "worker", "--tasks", "bench/noop_tasks.py"],
                           capture_output=True, text=True, cwd=REPO, timeout=60, check=False,
                           env={**os.environ, name: value})  # fmt: skip
        assert r.returncode == 2, (name, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(start), (name, r.stderr)


def ok(*args: str, db_url: str) -> str:
    r = horae(*args, db_url=db_url)
    assert r.returncode == 0, (args, r.stderr)
    return r.stdout


def parsed(*args: str, db_url: str) -> Any:
    return json.loads(ok(*args, "-o", "json", db_url=db_url))


async def test_a_job_is_created_listed_shown_paused_resumed_and_cancelled(
    db_url: str, stored: StoreRows
) -> None:
    job = parsed("jobs", "create", "--task", "send-invoice", "--cron", "0 9 * * 1",
                 "--tz", "Europe/Paris", "--payload", '{"customer": 42}', "--tenant", "acme",
                 "--name", "invoices", "--max-attempts", "3", "--timeout", "60",
                 "--catch-up", "All", "--catch-up-window", "1h30m",
                 "--concurrency-policy", "BufferOne", "--pause-after-failures", "3",
                 db_url=db_url)  # fmt: skip
    job_id = job["id"]
    assert job["failure_policy"] == {"pause_after_consecutive_failures": 3}
    assert (job["tenant"], job["name"], job["source"], job["state"]) == (
        "acme", "invoices", "api", "active")  # fmt: skip
    assert (job["catch_up"], job["catch_up_window_seconds"]) == ("All", 5400)
    assert len(job["next_runs"]) == 5
    for fire in job["next_runs"]:
        local = datetime.fromisoformat(fire).astimezone(ZoneInfo("Europe/Paris"))
        assert (local.weekday(), local.hour, local.minute) == (0, 9, 0)
    row = await stored.fetchrow("SELECT * FROM jobs WHERE id = $1", uuid.UUID(job_id))
    assert row["task"] == "send-invoice" and row["payload"] == {"customer": 42}
    assert row["retry_policy"]["max_attempts"] == 3 and row["timeout_seconds"] == 60
    assert row["concurrency_policy"] == job["concurrency_policy"] == "BufferOne"
    assert await statuses(stored, job_id) == ["scheduled"]

    assert [j["id"] for j in parsed("jobs", "ls", "--tenant", "acme", db_url=db_url)] == [job_id]
    assert parsed("jobs", "ls", "--tenant", "other", db_url=db_url) == []
    assert parsed("jobs", "ls", "--tenant", "acme", "--state", "paused", db_url=db_url) == []
    table = ok("jobs", "ls", "--tenant", "acme", db_url=db_url)
    assert job_id in table and "0 9 * * 1 (Europe/Paris)" in table and "active" in table

    shown = ok("jobs", "get", job_id, db_url=db_url)
    assert "next runs" in shown and "send-invoice" in shown and "All within 1h30m" in shown
    for fire in job["next_runs"]:
        assert fire.replace("T", " ") in shown  # each fire time, in UTC
    as_yaml = yaml.safe_load(ok("jobs", "get", job_id, "-o", "yaml", db_url=db_url))
    assert as_yaml["id"] == job_id and as_yaml["next_runs"] == job["next_runs"]

    edited = parsed("jobs", "edit", job_id, "--catch-up", "Skip", "--no-catch-up-window",
                    db_url=db_url)  # fmt: skip
    assert (edited["catch_up"], edited["catch_up_window_seconds"]) == ("Skip", None)
    assert edited["spec_version"] == 2 and await statuses(stored, job_id) == [
        "cancelled", "scheduled"]  # fmt: skip

    assert "pause after 3 consecutive failures (0 so far)" in shown
    paused = ok("jobs", "pause", job_id, "--reason", "INC-7: vendor down", db_url=db_url)
    assert paused.strip() == f"job {job_id} paused"
    assert await state(stored, job_id) == "paused"
    assert await statuses(stored, job_id) == ["cancelled", "cancelled"]
    got = parsed("jobs", "get", job_id, db_url=db_url)
    assert (got["next_runs"], got["paused_reason"]) == ([], "INC-7: vendor down")
    shown = ok("jobs", "get", job_id, db_url=db_url)
    assert "none (the job is paused)" in shown and "INC-7: vendor down" in shown

    assert ok("jobs", "resume", job_id, db_url=db_url).strip() == f"job {job_id} resumed"
    assert await state(stored, job_id) == "active"
    assert parsed("jobs", "get", job_id, db_url=db_url)["paused_reason"] is None
    assert sorted(await statuses(stored, job_id)) == ["cancelled", "cancelled", "scheduled"]

    assert ok("jobs", "cancel", job_id, db_url=db_url).strip() == f"job {job_id} cancelled"
    assert await state(stored, job_id) == "cancelled"
    assert await statuses(stored, job_id) == ["cancelled", "cancelled", "cancelled"]
    again = ok("jobs", "cancel", job_id, db_url=db_url).strip()
    assert again == f"job {job_id} was already cancelled"
    r = horae("jobs", "pause", job_id, db_url=db_url)
    assert r.returncode == 1
    assert r.stderr.strip() == (
        f"horae: job {job_id} is cancelled: only an active job can be paused"
    )


def test_jobs_edit_sets_and_removes_a_failure_policy(db_url: str) -> None:
    run_at = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    job_id = parsed("jobs", "create", "--task", "t", "--run-at", run_at, db_url=db_url)["id"]
    edited = parsed("jobs", "edit", job_id, "--pause-after-failures", "5", db_url=db_url)
    assert edited["failure_policy"] == {"pause_after_consecutive_failures": 5}
    assert (
        parsed("jobs", "edit", job_id, "--no-failure-policy", db_url=db_url)["failure_policy"]
        is None
    )


async def test_a_one_off_job_shows_its_single_fire_time(db_url: str, stored: StoreRows) -> None:
    run_at = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    job = parsed("jobs", "create", "--task", "e2e.echo", "--run-at", run_at.isoformat(),
                 db_url=db_url)  # fmt: skip
    assert job["tenant"] == "default" and job["cron"] is None
    assert [datetime.fromisoformat(t) for t in job["next_runs"]] == [run_at]
    row = await stored.fetchrow("SELECT due_at FROM executions WHERE job_id = $1",
                              uuid.UUID(job["id"]))  # fmt: skip
    assert row["due_at"] == run_at
    executions = parsed("executions", job["id"], db_url=db_url)
    assert [(e["job_id"], e["status"], e["attempt"]) for e in executions] == [
        (job["id"], "scheduled", 1)
    ]


def test_unknown_jobs_are_reported_with_exit_code_1(db_url: str) -> None:
    missing = str(uuid.uuid4())
    cases = {
        ("jobs", "get", missing): f"horae: job {missing} not found",
        ("jobs", "get", "ns/nothing"): "horae: job ns/nothing not found",
        ("jobs", "pause", missing): f"horae: job {missing} not found",
        ("jobs", "resume", "ns/nothing"): "horae: job ns/nothing not found",
        ("jobs", "cancel", missing): f"horae: job {missing} not found",
        ("executions", "ns/typo"): "horae: job ns/typo not found",
        ("executions", missing, "-o", "json"): f"horae: job {missing} not found",
    }
    for (args, message), r in zip(cases.items(), horae_each(cases, db_url), strict=True):
        assert r.returncode == 1, (args, r.stderr)
        assert r.stderr.strip() == message, args


async def test_bad_job_input_is_one_line_exit_code_2_and_writes_nothing(
    db_url: str, stored: StoreRows
) -> None:
    soon = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    create = ("jobs", "create", "--task", "e2e.echo")
    cases = {
        (*create, "--cron", "61 * * * *"): "horae: --cron: invalid cron '61 * * * *'",
        (*create, "--cron", "* * * * *", "--tz", "Mars/X"): "horae: --tz: unknown time zone",
        (*create, "--run-at", "2030-01-01T09:00:00"): "horae: --run-at: needs a UTC offset",
        (*create, "--run-at", "tomorrow"): "horae: --run-at: not an ISO 8601 instant",
        (*create, "--run-at", "9999-12-31T23:59:59-05:00"): "horae: --run-at: must be from "
        "1970-01-01T00:00:00Z to before 9000-01-01T00:00:00Z",
        (*create, "--run-at", "2020-01-01T00:00:00Z"): "horae: --run-at: is more than",
        (*create, "--run-at", soon, "--payload", "[1, 2]"): "horae: --payload: must be a JSON "
        "object, got list",
        (*create, "--run-at", soon, "--payload", "{oops"): "horae: --payload: not valid JSON",
        (*create,): "horae: exactly one of --cron and --run-at is required",
        (*create, "--cron", "* * * * *", "--run-at", soon): "horae: exactly one of --cron",
        (*create, "--run-at", soon, "--tz", "Europe/Paris"): "horae: --tz: applies to --cron",
        (*create, "--run-at", soon, "--max-attempts", "0"): "horae: --max-attempts:",
        (*create, "--run-at", soon, "--max-attempts", "many"): "horae: Invalid value for "
        "'--max-attempts'",
        (*create, "--run-at", soon, "--timeout", "0"): "horae: --timeout:",
        (*create, "--cron", "* * * * *", "--pause-after-failures", "0"): "horae: "
        "--pause-after-failures: Input should be greater than or equal to 1",
        (*create, "--cron", "* * * * *", "--pause-after-failures", "1001"): "horae: "
        "--pause-after-failures: Input should be less than or equal to 1000",
        ("jobs", "pause", str(uuid.uuid4()), "--reason", "r" * 501): "horae: --reason: is 501 "
        "characters; the limit is 500",
        ("jobs", "pause", str(uuid.uuid4()), "--reason", ""): "horae: --reason: cannot be empty",
        ("jobs", "edit", str(uuid.uuid4()), "--pause-after-failures", "0"): "horae: Invalid "
        "value for '--pause-after-failures'",
        (*create, "--cron", "* * * * *", "--concurrency-policy", "Buffer"): "horae: "
        "--concurrency-policy must be one of Allow, Forbid, Replace, BufferOne; got 'Buffer'",
        (*create, "--run-at", soon, "-o", "xml"): "horae: -o/--output must be one of",
        (*create, "--run-at", soon, "--tenant", ""): "horae: --tenant: must be 1 to 253",
        (*create, "--cron", "* * * * *", "--catch-up", "Some"): "horae: --catch-up must be one"
        " of Skip, Latest, All; got 'Some'",
        (*create, "--cron", "* * * * *", "--catch-up-window", "1d"): "horae: --catch-up-window:"
        " '1d' is not a duration",
        (*create, "--cron", "* * * * *", "--catch-up-window", "0s"): "horae: --catch-up-window:"
        " '0s' is out of range: a catch-up window is from 1s to 744h (31 days)",
        (*create, "--cron", "* * * * *", "--catch-up-window", "745h"): "horae: --catch-up-window:"
        " '745h' is out of range",
        (*create, "--run-at", soon, "--catch-up", "All"): "horae: --catch-up: applies to --cron",
        ("jobs", "edit", str(uuid.uuid4())): "horae: nothing to change: give --catch-up,",
        ("jobs", "edit", str(uuid.uuid4()), "--catch-up-window", "5x"): "horae: "
        "--catch-up-window: '5x' is not a duration",
        ("jobs", "edit", str(uuid.uuid4()), "--catch-up", "Never"): "horae: --catch-up must be",
        ("jobs", "create", "--task", "Not A Task", "--run-at", soon): "horae: --task:",
        ("jobs", "create", "--run-at", soon): "horae: Missing option '--task'",
        ("jobs", "ls", "--state", "sleeping"): "horae: --state must be one of active,",
        ("jobs", "ls", "--limit", "0"): "horae: Invalid value for '--limit'",
        ("jobs", "get", "not-a-ref"): "horae: JOB must be a job id or NAMESPACE/NAME",
        ("jobs", "pause", "a/b/c"): "horae: JOB must be a job id or NAMESPACE/NAME",
        ("executions", "ns/name", "-w", "-o", "json"): "horae: --watch: shows a table",
        ("tenants", "ls", "-o", "csv"): "horae: -o/--output must be one of",
    }
    for (args, start), r in zip(cases.items(), horae_each(cases, db_url), strict=True):
        assert r.returncode == 2, (args, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(start), (args, r.stderr)
        assert r.stdout == "", args
    assert await stored.count("SELECT count(*) FROM jobs") == 0
    assert await stored.count("SELECT count(*) FROM executions") == 0


def test_previews_and_tenants_print_json_and_yaml_for_scripts(db_url: str) -> None:
    preview = ("schedule", "preview", "30 1 * * *", "--tz", "America/New_York", "-n", "2",
               "--after", "2026-10-31T12:00:00Z")  # fmt: skip
    expected = [
        {"utc": "2026-11-01T05:30:00Z", "local": "2026-11-01T01:30:00-04:00"},
        {"utc": "2026-11-02T06:30:00Z", "local": "2026-11-02T01:30:00-05:00"},
    ]
    assert parsed(*preview, db_url=db_url) == expected
    assert yaml.safe_load(ok(*preview, "-o", "yaml", db_url=db_url)) == expected
    ok("tenants", "set", "acme", "--max-running", "5", db_url=db_url)
    tenants = [
        {
            "name": "acme",
            "max_running": 5,
            "running": 0,
            "max_jobs": 100_000,
            "jobs": 0,
            "max_fires_per_minute": 100_000,
            "fires_per_minute": 0.0,
        }
    ]
    assert parsed("tenants", "ls", db_url=db_url) == tenants
    assert yaml.safe_load(ok("tenants", "ls", "-o", "yaml", db_url=db_url)) == tenants


async def state(stored: StoreRows, job_id: str) -> str:
    return str(await stored.fetchval("SELECT state FROM jobs WHERE id = $1", uuid.UUID(job_id)))


async def statuses(stored: StoreRows, job_id: str) -> list[str]:
    rows = await stored.fetch(
        "SELECT status FROM executions WHERE job_id = $1 ORDER BY created_at, status",
        uuid.UUID(job_id),
    )
    return [r["status"] for r in rows]


async def test_rerun_runs_a_dead_occurrence_again_and_refuses_the_rest(
    db_url: str, stored: StoreRows
) -> None:
    at = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    r = horae("jobs", "create", "--task", "t", "--run-at", at, "-o", "json", db_url=db_url)
    assert r.returncode == 0, r.stderr
    job_id = uuid.UUID(json.loads(r.stdout)["id"])
    dead = await stored.fetchval(
        "UPDATE executions SET status = 'dead', started_at = now(), finished_at = now(),"
        " error_kind = 'E', error_message = 'boom' WHERE job_id = $1 RETURNING id",
        job_id,
    )
    await stored.execute("UPDATE jobs SET state = 'completed' WHERE id = $1", job_id)
    r = horae("rerun", str(dead), db_url=db_url)
    assert r.returncode == 0, r.stderr
    new = uuid.UUID(r.stdout.strip())
    row = await stored.fetchrow("SELECT status, attempt FROM executions WHERE id = $1", new)
    assert (row["status"], row["attempt"]) == ("scheduled", 2)
    again = horae("rerun", str(dead), db_url=db_url)
    assert again.returncode == 1
    assert again.stderr.strip() == (
        f"horae: execution {dead} is attempt 1 of its occurrence; attempt 2 ({new}) is the"
        " latest: re-run that one"
    )
    bad = horae("rerun", "0193abc", db_url=db_url)  # fewer than 8 digits
    assert bad.returncode == 2 and bad.stderr.startswith("horae: EXECUTION must be")
    missing = horae("rerun", str(uuid.uuid4()), db_url=db_url)
    assert missing.returncode == 1 and "not found" in missing.stderr


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([HORAE, *args], env=env, cwd=REPO, stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip


async def test_the_api_starts_with_only_a_tokens_file_outside_a_cluster(
    db_url: str, tmp_path: Path
) -> None:
    """The README's local-development setup: `HORAE_API_TOKENS_FILE` and no cluster. The API
    once always added Kubernetes authentication and crashed at start outside a cluster."""
    tokens = tmp_path / "tokens"
    tokens.write_text("dev-token,acme\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cluster = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "HORAE_API_KUBERNETES_AUTH")
    env = {k: v for k, v in os.environ.items() if k not in cluster}
    env |= {"HORAE_DATABASE_URL": db_url, "HORAE_API_TOKENS_FILE": str(tokens)}
    log = tmp_path / "api.log"
    api = _start(["api", "--port", str(port)], env, log)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:

            async def ready() -> bool:
                try:
                    return (await http.get("/readyz")).status_code == 200
                except httpx.TransportError:
                    assert api.poll() is None, log.read_text()
                    return False

            await until(ready, timeout=30, what="the API ready")
            r = await http.get("/jobs", headers={"Authorization": "Bearer dev-token"})
            assert r.status_code == 200, r.text
        assert (
            f"horae api on 127.0.0.1:{port}: authenticators: static tokens from {tokens}"
            " (local development only)"
        ) in log.read_text().splitlines()
    finally:
        api.terminate()
        api.wait(timeout=15)
    nothing = {k: v for k, v in env.items() if k != "HORAE_API_TOKENS_FILE"}
    r = subprocess.run([HORAE, "api", "--port", str(port)], env=nothing,  # noqa: ASYNC221
                       capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "horae: no authenticator: run in a cluster or set KUBECONFIG (Kubernetes tokens), or"
        " set HORAE_API_TOKENS_FILE (local development)"
    ]


def test_a_create_over_a_tenant_quota_is_one_line_and_exit_code_1(db_url: str) -> None:
    ok("tenants", "set", "quota", "--max-jobs", "1", db_url=db_url)
    create = ("jobs", "create", "--task", "t", "--cron", "0 * * * *", "--tenant", "quota")
    ok(*create, db_url=db_url)
    r = horae(*create, db_url=db_url)
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines() == [
        "horae: tenant quota is at its quota max_jobs=1: 1 in use, this adds 1 (an administrator"
        " can raise it: horae tenants set quota --max-jobs N)"
    ]
    listed = parsed("tenants", "ls", db_url=db_url)
    assert [(t["name"], t["max_jobs"], t["jobs"]) for t in listed] == [("quota", 1, 1)]
    bad = horae("tenants", "set", "quota", "--max-fires-per-minute", "0", db_url=db_url)
    assert bad.returncode == 2
    assert bad.stderr.startswith("horae: --max-fires-per-minute must be >= 1")


async def test_a_scheduledjobs_job_is_not_paused_resumed_or_cancelled_from_the_cli(
    db_url: str, stored: StoreRows
) -> None:
    """The store refuses to change a ScheduledJob's job for anyone but the operator: the
    CLI, like the API, once made it diverge from its manifest."""
    job_id = await stored.create_job(
        JobSpec(task="t", cron="0 * * * *"), tenant="shop", source=JobSource.CRD,
        now=datetime.now(UTC), name="nightly",
    )  # fmt: skip
    before = await stored.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id)
    for verb in ("pause", "resume", "cancel"):
        r = horae("jobs", verb, "shop/nightly", db_url=db_url)
        assert r.returncode == 1, (verb, r.stderr)
        assert r.stderr.strip().splitlines() == [
            f"horae: job {job_id} is managed by ScheduledJob shop/nightly: change it there"
            " (kubectl edit scheduledjob/nightly -n shop; kubectl delete to cancel it)"
        ], verb
    assert await stored.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id) == before


async def test_trigger_runs_a_job_once_now_as_a_manual_execution(
    db_url: str, stored: StoreRows
) -> None:
    """`horae jobs trigger` is the HTTP API's :trigger: one manual execution due now, of a
    job from the API or from a ScheduledJob alike; one line, exit code 2 on bad input and 1
    when the job cannot run."""
    job_id = await stored.create_job(
        JobSpec(task="t", cron="0 0 1 1 *"), tenant="shop", source=JobSource.CRD,
        now=datetime.now(UTC), name="nightly",
    )  # fmt: skip
    r = horae("jobs", "trigger", "shop/nightly", db_url=db_url)
    assert r.returncode == 0, r.stderr
    [line] = r.stdout.splitlines()
    prefix = f"job {job_id} triggered: execution "
    assert line.startswith(prefix), line
    execution_id = uuid.UUID(line.removeprefix(prefix))
    row = await stored.fetchrow("SELECT * FROM executions WHERE id = $1", execution_id)
    assert (row["status"], row["attempt"], row["manual"]) == ("scheduled", 1, True)
    assert abs(row["due_at"] - datetime.now(UTC)) < timedelta(seconds=30)
    [shown] = [e for e in parsed("executions", "shop/nightly", db_url=db_url)
               if e["id"] == str(execution_id)]  # fmt: skip
    assert shown["manual"] is True

    paused = parsed("jobs", "create", "--task", "t", "--cron", "0 0 1 1 *", db_url=db_url)
    ok("jobs", "pause", paused["id"], db_url=db_url)
    for args, code, message in [
        (("jobs", "trigger", "not-a-ref"), 2,
         "horae: JOB must be a job id or NAMESPACE/NAME, got 'not-a-ref'"),
        (("jobs", "trigger"), 2, "horae: Missing argument 'job'."),
        (("jobs", "trigger", "shop/nothing"), 1, "horae: job shop/nothing not found"),
        (("jobs", "trigger", paused["id"]), 1,
         f"horae: job {paused['id']} is paused: only an active job can be triggered"),
    ]:  # fmt: skip
        r = horae(*args, db_url=db_url)
        assert (r.returncode, r.stderr.strip().splitlines()) == (code, [message]), args
        assert r.stdout == "", args
    manual = await stored.count("SELECT count(*) FROM executions WHERE manual")
    assert manual == 1

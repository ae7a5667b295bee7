"""The real `horae` command against a real database."""

from __future__ import annotations

import os
import subprocess

from tests.support.processes import HORAE, REPO


def horae(*args: str, db_url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({"HORAE_DATABASE_URL": db_url} if db_url else {})}
    return subprocess.run([HORAE, *args], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=60, check=False)  # fmt: skip


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
        ("executions", "not-a-ref"): "horae: JOB must be a job id or NAMESPACE/NAME",
        ("executions", "ns/name", "--status", "great"): "horae: --status must be one of",
    }
    for args, start in cases.items():
        r = horae(*args)
        assert r.returncode == 2, (args, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(start), (args, r.stderr)


def test_tenant_limits_are_set_and_listed(db_url: str) -> None:
    r = horae("tenants", "set", "acme", "--max-running", "5", db_url=db_url)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "acme: max_running=5 running=0"
    r = horae("tenants", "ls", db_url=db_url)
    assert r.stdout.strip() == "acme\tmax_running=5\trunning=0"
    bad = horae("tenants", "set", "acme", "--max-running", "0", db_url=db_url)
    assert bad.returncode == 2 and bad.stderr.startswith("horae: --max-running must be >= 1")


def test_bad_settings_stop_a_component_with_one_line_naming_the_variable() -> None:
    cases = {
        "HORAE_DEAD_WEBHOOK_URL": ("ftp://alerts", "horae: HORAE_DEAD_WEBHOOK_URL: expected an "
                                   "http(s) URL, got 'ftp://alerts'"),
        "HORAE_CONCURRENCY": ("many", "horae: HORAE_CONCURRENCY: expected an integer"),
    }  # fmt: skip
    for name, (value, start) in cases.items():
        r = subprocess.run([HORAE, "worker", "--tasks", "bench/noop_tasks.py"],
                           capture_output=True, text=True, cwd=REPO, timeout=60, check=False,
                           env={**os.environ, name: value})  # fmt: skip
        assert r.returncode == 2, (name, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(start), (name, r.stderr)

"""The real `horae` against a real store: execution ids as `horae executions` shows them
and as `horae rerun` takes them, `-o wide` and `-o name` (piped back into the commands),
and shell completion as a user installs it."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from horae.models import JobSource, JobSpec
from tests.integration.test_cli import horae, horae_each, ok, parsed
from tests.support.execution_ids import made_at
from tests.support.groups import job_in
from tests.support.processes import HORAE
from tests.support.store_rows import StoreRows


def cells(table: str, column: str) -> list[str]:
    """One column of a table `horae` printed, row by row (lines a wrapped cell continues
    on left out)."""
    lines = [
        re.split("[│┃]", line)[1:-1] for line in table.splitlines() if "│" in line or "┃" in line
    ]
    header = [c.strip() for c in lines[0]]
    k = header.index(column)
    return [row[k].strip() for row in lines[1:] if row[0].strip()]


async def dead_run(
    stored: StoreRows, job_id: uuid.UUID, execution: uuid.UUID, due: datetime
) -> None:
    """An attempt of the job that ran at `due` and died, with the id `execution`."""
    async with stored.on_job(job_id) as conn:
        await conn.execute(
            "INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at,"
            " attempt, job_version, status, started_at, finished_at, error_kind, error_message)"
            " SELECT $2, id, tenant, task, shard, $3, $3, 1, spec_version, 'dead', $3, $3, 'E',"
            " 'boom' FROM jobs WHERE id = $1",
            job_id,
            execution,
            due,
        )


async def attempts(stored: StoreRows, execution: uuid.UUID) -> list[int]:
    """The attempts of the occurrence `execution` is one of, in order."""
    rows = await stored.fetch(
        "SELECT e.attempt FROM executions e JOIN executions x"
        " ON x.job_id = e.job_id AND x.occurrence_at = e.occurrence_at"
        " WHERE x.id = $1 ORDER BY e.attempt",
        execution,
    )
    return [r["attempt"] for r in rows]


async def test_executions_tell_runs_apart_and_rerun_takes_the_ids_shown(
    db_url: str, stored: StoreRows
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    spec = JobSpec(task="t", cron="0 0 1 1 *")
    # One job in each store group (the split run; both in the one group otherwise).
    every, other = [
        await stored.create_job(
            spec, job_id=job_in(shard), tenant="acme", source=JobSource.API, now=now
        )
        for shard in (0, 1)
    ]
    # A 3-second cron's runs of one minute: their first 8 hex digits are alike.
    start = int((now - timedelta(minutes=5)).timestamp() * 1000)
    runs = [made_at(start + 3000 * k) for k in range(6)]
    for k, run in enumerate(runs):
        await dead_run(stored, every, run, now - timedelta(minutes=5) + timedelta(seconds=3 * k))
    # Two made in the same millisecond, of different jobs (and groups).
    twin, twin_elsewhere = made_at(start + 30_000), made_at(start + 30_000)
    await dead_run(stored, every, twin, now - timedelta(minutes=4))
    await dead_run(stored, other, twin_elsewhere, now - timedelta(minutes=4))

    shown = cells(ok("executions", str(every), db_url=db_url), "EXECUTION")
    assert len({run.hex[:8] for run in runs}) < len(runs)
    assert shown[-6:] == [run.hex[:12] for run in reversed(runs)]
    assert twin.hex[:12] in shown and len(set(shown)) == len(shown)
    # Listed together, the twins show as many digits as tell them apart.
    both = cells(ok("executions", str(every), str(other), db_url=db_url), "EXECUTION")
    apart = next(k for k in range(32) if twin.hex[k] != twin_elsewhere.hex[k]) + 1
    assert {twin.hex[:apart], twin_elsewhere.hex[:apart]} <= set(both)

    # `horae rerun` takes what the table shows.
    r = horae("rerun", runs[1].hex[:12], db_url=db_url)
    assert r.returncode == 0, r.stderr
    assert await attempts(stored, runs[1]) == [1, 2]
    assert (
        await stored.fetchval(
            "SELECT attempt FROM executions WHERE id = $1", uuid.UUID(r.stdout.strip())
        )
        == 2
    )
    # Digits that begin two executions name neither.
    r = horae("rerun", twin.hex[:12], db_url=db_url)
    forms = sorted([twin.hex[:apart], twin_elsewhere.hex[:apart]])
    assert (r.returncode, r.stderr.splitlines()) == (
        1,
        [
            f"horae: execution {twin.hex[:12]} is ambiguous: 2 executions begin so"
            f" ({', '.join(forms)}); give more of its digits"
        ],
    )
    assert await attempts(stored, twin) == [1] and await attempts(stored, twin_elsewhere) == [1]
    for execution, given in (
        (twin_elsewhere, twin_elsewhere.hex[:apart]),
        (runs[2], f"execution/{runs[2]}"),
        (runs[3], str(runs[3])[:13]),
    ):
        r = horae("rerun", given, db_url=db_url)
        assert r.returncode == 0, (given, r.stderr)
        assert await attempts(stored, execution) == [1, 2], given
    r = horae("rerun", "00000000", db_url=db_url)
    assert (r.returncode, r.stderr.strip()) == (1, "horae: execution 00000000 not found")


async def test_wide_adds_columns_and_name_prints_what_the_commands_take(
    db_url: str, stored: StoreRows
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    created = ok(
        "jobs",
        "create",
        "--task",
        "send-invoice",
        "--cron",
        "0 9 * * 1",
        "--tenant",
        "acme",
        "--name",
        "invoices",
        "--max-attempts",
        "3",
        "-o",
        "name",
        db_url=db_url,
    ).splitlines()
    assert len(created) == 1 and created[0].startswith("job/")
    job_id = uuid.UUID(created[0].removeprefix("job/"))
    run = made_at(int((now - timedelta(minutes=1)).timestamp() * 1000))
    await dead_run(stored, job_id, run, now - timedelta(minutes=1))

    # What reads the same store runs at once (each `horae` is a Python start-up).
    job, ref = str(job_id), f"job/{job_id}"
    reads = (
        ("jobs", "ls", "--tenant", "acme", "-o", "name"),
        ("jobs", "ls", "--tenant", "acme", "-o", "wide"),
        ("jobs", "get", ref, "-o", "json"),
        ("jobs", "get", ref, "-o", "name"),
        ("executions", ref, "-o", "name"),
        ("executions", job, "-o", "json"),
        ("executions", job, "-o", "wide"),
        ("executions", job, "--status", "dead", "-o", "name"),
        # Not for every command:
        ("jobs", "get", job, "-o", "wide"),
        ("schedule", "preview", "* * * * *", "-o", "name"),
        ("executions", job, "-w", "-o", "name"),
    )
    done = horae_each(reads, db_url)
    for args, r in zip(reads[:8], done, strict=False):
        assert r.returncode == 0, (args, r.stderr)
    ls_name, ls_wide, got, got_name, names, listed, wide, dead, *refused = done
    assert ls_name.stdout == f"job/{job_id}\n"
    assert cells(ls_wide.stdout, "SOURCE") == ["api"]
    assert cells(ls_wide.stdout, "MAX ATTEMPTS") == ["3"]
    assert cells(ls_wide.stdout, "ID") == [str(job_id)]
    # What -o name prints is a JOB to the other commands.
    assert json.loads(got.stdout)["id"] == str(job_id)
    assert got_name.stdout == f"job/{job_id}\n"

    ids = [e["id"] for e in json.loads(listed.stdout)]
    assert names.stdout.splitlines() == [f"execution/{i}" for i in ids]
    assert f"execution/{run}" in names.stdout.splitlines()
    assert str(run) in cells(wide.stdout, "EXECUTION")
    assert "send-invoice" in cells(wide.stdout, "TASK")
    assert "E: boom" in cells(wide.stdout, "ERROR")
    for args, r in zip(reads[8:], refused, strict=True):
        assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, (args, r.stderr)
    assert refused[0].stderr == (
        "horae: -o/--output must be one of table, name, json, yaml; got 'wide'\n"
    )
    r = horae("rerun", dead.stdout.strip(), db_url=db_url)  # as `| xargs -n1 horae rerun` would
    assert r.returncode == 0, r.stderr
    assert ok("jobs", "pause", ref, db_url=db_url).strip() == f"job {job_id} paused"

    ok("tenants", "set", "acme", "--max-running", "5", db_url=db_url)
    lists = (("tenants", "ls", "-o", "name"), ("tenants", "ls", "-o", "wide"), ("tenants", "ls"))
    tenant_names, tenants_wide, tenants = horae_each(lists, db_url)
    assert all(r.returncode == 0 for r in (tenant_names, tenants_wide, tenants))
    assert tenant_names.stdout == "tenant/acme\n"
    assert tenants_wide.stdout == tenants.stdout and tenants.stdout.startswith("acme")
    r = horae("tenants", "set", "tenant/acme", "--max-running", "7", db_url=db_url)
    assert r.stdout.startswith("acme: max_running=7 "), r.stderr


def test_completion_installs_for_bash_and_completes_commands_and_values(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "PATH": f"{Path(HORAE).parent}:{os.environ['PATH']}",
    }
    # As typed in an interactive bash: typer finds the shell among horae's parents (a lone
    # command would be exec'd by `bash -c`, leaving whatever ran the test as the parent).
    installed = subprocess.run(
        ["bash", "-c", "horae --install-completion; exit $?"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    assert installed.stdout.startswith(
        f"bash completion installed in {tmp_path}/.bash_completions/horae.sh"
    )

    def completions(*words: str) -> list[str]:
        """What Tab offers after `words` (the last one being typed), in a new shell."""
        script = (
            f"source ~/.bashrc; COMP_WORDS=({shlex.join(words)}); COMP_CWORD={len(words) - 1};"
            ' _horae_completion horae; printf "%s\\n" "${COMPREPLY[@]}"'
        )
        shell = subprocess.run(
            ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert shell.returncode == 0, shell.stderr
        return shell.stdout.split()

    assert completions("horae", "exe") == ["executions"]
    assert completions("horae", "ex") == ["executions", "explain"]
    assert completions("horae", "jobs", "ls", "-o", "") == ["table", "wide", "name", "json", "yaml"]
    assert completions("horae", "jobs", "ls", "--state", "p") == ["paused"]
    assert completions("horae", "executions", "ns/x", "--status", "d") == ["dead"]
    assert completions("horae", "schedule", "preview", "-o", "") == ["table", "json", "yaml"]


async def test_a_result_shows_in_the_wide_table_cut_short_and_whole_in_json(
    db_url: str, stored: StoreRows
) -> None:
    job_id = uuid.UUID(parsed("jobs", "create", "--task", "report", "--cron", "0 9 * * 1",
                              db_url=db_url)["id"])  # fmt: skip
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    result = {"rows": list(range(100)), "by": "worker"}
    async with stored.on_job(job_id) as conn:
        await conn.execute(
            "INSERT INTO executions (id, job_id, tenant, task, shard, due_at, occurrence_at,"
            " attempt, job_version, status, started_at, finished_at, result)"
            " SELECT $2, id, tenant, task, shard, $3, $3, 1, spec_version, 'succeeded', $3, $3,"
            " $4 FROM jobs WHERE id = $1",
            job_id,
            made_at(int(due.timestamp() * 1000)),
            due,
            result,
        )
    wide = ok("executions", str(job_id), "--status", "succeeded", "-o", "wide", db_url=db_url)
    [shown] = cells(wide, "RESULT")
    assert shown.startswith('{"by":"worker","rows":[0,1,2,3,') and "RESULT" not in ok(
        "executions", str(job_id), db_url=db_url
    )
    [listed] = parsed("executions", str(job_id), "--status", "succeeded", db_url=db_url)
    assert listed["result"] == result

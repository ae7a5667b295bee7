"""Where a run's WAL goes: bytes and records per execution, by relation and record type.

    sudo .venv/bin/python -m bench.wal_anatomy -- --scenario sustained --rate 2000 --seconds 40

Runs `bench.horae_driver` with the arguments after `--` on the local cluster
(HORAE_DATABASE_URL's, one store group), and reads the WAL it wrote with `pg_waldump`:
each record's relation is named by the scratch database's catalog (read while the run is
on, since the database is dropped at its end), a partition's table or index by its parent's
name, so `executions_pkey` sums every day's partition. Prints the table, largest first, and
the total, per execution started (the Result's `started`; the driver's Result lines go to
stdout).

A dev-machine tool: it runs `psql` and `pg_waldump` as the `postgres` user (so as root),
and keeps the run's WAL by raising `wal_keep_size` for the run (ALTER SYSTEM, reset after).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from urllib.parse import urlsplit

KEEP = "4GB"
RELATIONS = """
SELECT pg_relation_filenode(c.oid), coalesce(p.relname, c.relname)
FROM pg_class c
LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
LEFT JOIN pg_class p ON p.oid = i.inhparent
WHERE pg_relation_filenode(c.oid) IS NOT NULL
"""
RECORD = re.compile(r"rmgr: (\S+)\s+len \(rec/tot\):\s*(\d+)/\s*(\d+).*?desc: (\S+)")
BLOCK = re.compile(r"rel \d+/(\d+)/(\d+)")


def psql(port: int, sql: str, database: str = "postgres") -> list[list[str]]:
    out = subprocess.run(
        ["runuser", "-u", "postgres", "--", "psql", "-p", str(port), "-d", database,
         "-XtAF", "\t", "-c", sql],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return [line.split("\t") for line in out.splitlines() if line]


def scratch_databases(port: int, known: set[str]) -> list[str]:
    rows = psql(port, "SELECT datname FROM pg_database WHERE NOT datistemplate")
    return [r[0] for r in rows if r[0] not in known]


def catalog(port: int, database: str) -> tuple[str, dict[str, str]]:
    """The database's oid, and its relations' names by relfilenode."""
    oid = psql(port, "SELECT oid FROM pg_database WHERE datname = current_database()", database)
    return oid[0][0], {node: name for node, name in psql(port, RELATIONS, database)}


def anatomy(
    dump: str, database: str, names: dict[str, str]
) -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str]], int]:
    """Bytes and records by (record type, relation) in pg_waldump's text output, and the
    bytes of full-page images in them (a page's first change after a checkpoint)."""
    images = 0
    size: Counter[tuple[str, str]] = Counter()
    count: Counter[tuple[str, str]] = Counter()
    for line in dump.splitlines():
        record = RECORD.search(line)
        if not record:
            continue
        block = BLOCK.search(line)
        if block is None:
            relation = "-"
        elif block.group(1) == database:
            relation = names.get(block.group(2), f"relfilenode {block.group(2)}")
        else:
            relation = "(another database)"
        key = (f"{record.group(1)}/{record.group(4)}", relation)
        size[key] += int(record.group(3))
        count[key] += 1
        if "FPW" in line:
            images += int(record.group(3)) - int(record.group(2))
    return size, count, images


def drive(
    port: int, known: set[str], driver: list[str]
) -> tuple[str, tuple[str, str, dict[str, str]] | None]:
    """Run the driver; its Result lines, and its scratch database's (name, oid, relations)
    as last seen while it ran: read again every 2 s, since the scheduler makes partitions
    (and their indexes) after the migration."""
    seen = None
    with tempfile.TemporaryFile("w+") as out:
        run = subprocess.Popen([sys.executable, "-m", "bench.horae_driver", *driver], stdout=out)
        while run.poll() is None:
            time.sleep(2)
            for db in scratch_databases(port, known):
                try:
                    oid, names = catalog(port, db)
                except subprocess.CalledProcessError:
                    continue  # created or dropped as we looked: the last catalog read stands
                if any(n.startswith("executions_") for n in names.values()):
                    seen = (db, oid, names)
        if run.returncode:
            sys.exit(run.returncode)
        out.seek(0)
        return out.read(), seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=30, help="rows of the table")
    parser.add_argument("driver", nargs=argparse.REMAINDER, help="-- horae_driver arguments")
    args = parser.parse_args()
    driver = [a for a in args.driver if a != "--"]
    port = urlsplit(os.environ["HORAE_DATABASE_URL"]).port or 5432
    known = set(scratch_databases(port, set()))
    data = psql(port, "SHOW data_directory")[0][0]
    major = int(psql(port, "SHOW server_version_num")[0][0]) // 10000
    psql(port, f"ALTER SYSTEM SET wal_keep_size = '{KEEP}'")
    psql(port, "SELECT pg_reload_conf()")
    try:
        start, first = psql(port, "SELECT l, pg_walfile_name(l) FROM pg_current_wal_lsn() l")[0]
        results, seen = drive(port, known, driver)
        end, last = psql(port, "SELECT l, pg_walfile_name(l) FROM pg_current_wal_lsn() l")[0]
        dump = subprocess.run(
            # the segments named, so that the first's header (not that of whichever file
            # pg_waldump finds first, perhaps one being preallocated) gives the segment size
            ["runuser", "-u", "postgres", "--", f"/usr/lib/postgresql/{major}/bin/pg_waldump",
             "-s", start, "-e", end, f"{data}/pg_wal/{first}", f"{data}/pg_wal/{last}"],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
    finally:
        psql(port, "ALTER SYSTEM RESET wal_keep_size")
        psql(port, "SELECT pg_reload_conf()")
    if seen is None:
        sys.exit("the run's scratch database was never seen")
    db, oid, names = seen
    size, count, images = anatomy(dump, oid, names)
    print(results, end="", flush=True)
    executions = sum(json.loads(line)["started"] for line in results.splitlines()) or 1
    total = sum(size.values())
    print(f"WAL from {start} to {end} ({db}): {total / 2**20:.1f} MiB, {executions} executions "
          f"started, {total / executions:.0f} bytes per execution, {images / executions:.0f} "
          f"of them full-page images", file=sys.stderr)  # fmt: skip
    print(f"{'record':24} {'relation':34} {'records/exec':>12} {'bytes/exec':>10}", file=sys.stderr)
    for (kind, rel), b in size.most_common(args.rows):
        print(f"{kind:24} {rel:34} {count[kind, rel] / executions:12.2f} "
              f"{b / executions:10.1f}", file=sys.stderr)  # fmt: skip
    by_relation: Counter[str] = Counter()
    for (_, rel), b in size.items():
        by_relation[rel] += b
    print(f"\n{'relation':34} {'bytes/exec':>10}", file=sys.stderr)
    for rel, b in by_relation.most_common(args.rows):
        print(f"{rel:34} {b / executions:10.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()

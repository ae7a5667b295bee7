"""`make bench`: every scenario of the benchmark suite, Horae and its peers, one after the
other on this machine; writes `bench/results/<date>-<scenario>.md`, PNG plots beside them
and the one-page comparison `bench/results/README.md`. Results are data, not assertions.

    .venv/bin/python -m bench.run [--scale 1.0] [--repeat 3] [--baseline REV]
        [--only top,sustained,failover,worker-faults,ingest,scan]
        [--peers procrastinate,celery,apscheduler] [--seconds 120]

Scenarios: top of the hour (20,000 and 100,000 due in one second), sustained capacity (a
constant rate for --seconds, stepped until p99 start lag exceeds 1 s), failover (a scheduler
SIGKILLed and restarted in place, one replaced, a rolling restart), worker faults (a worker
SIGKILLed, one frozen for 10 s), API ingest, preload cost vs history (0, 1 M, 10 M rows).
Every scenario but ingest and scan runs `--repeat` times (3), the runs of every system
interleaved, and each figure is reported as the median of the runs with their min and max
(issue 22). `--baseline REV` (repeatable) also measures Horae at that commit in the same
run, as the system `horae@REV`: its tree and venv are made once under
~/.cache/horae-bench/<commit> (`git archive`, `make venv`), and its own driver runs against
the same PostgreSQL, RabbitMQ and control plane. `--scale` multiplies the counts, rates and
history sizes.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.load import Result, starts_per_second

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
PY = str(REPO / ".venv" / "bin" / "python")
PEERS_PY = str(REPO / ".venv-peers" / "bin" / "python")
LAG_BOUND = 1.0  # seconds: the sustained rate is held while p99 start lag stays within it
NONE = "-"  # a figure not measured
STEP = 1.25  # sustained: the next rate tried is this many times the last

# Peer name -> (module under bench.peers, first sustained rate tried). The first rates come
# from short probes on this machine (see bench/results/README.md); the step-up goes down
# from there as well as up, so a bad guess costs a step, not the answer.
PEERS: dict[str, tuple[str, int]] = {
    "procrastinate": ("bench.peers.procrastinate_driver", 300),
    "celery": ("bench.peers.celery_driver", 1100),
    "apscheduler": ("bench.peers.apscheduler_driver", 200),
}
HORAE_FIRST_RATE = 2000
CPU_RATE = 2000
"""Sustained: the rate whose runs give CPU and WAL per execution (issue 22's 2,000/s)."""
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "horae-bench"
BASELINES: dict[str, Path] = {}
"""`horae@REV` -> the tree its driver runs in (filled by `--baseline`)."""


def log(msg: str) -> None:
    print(f"[bench {datetime.now(UTC):%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


@dataclass
class Run:
    """One command of the suite: what ran, how long, what it printed."""

    command: list[str]
    seconds: float
    stdout: str
    results: list[Result] = field(default_factory=list)

    @property
    def shell(self) -> str:
        return " ".join(shlex.quote(c.replace(str(REPO) + "/", "")) for c in self.command)


def run(command: list[str], timeout: float = 3600, *, system: str | None = None) -> Run:
    """Run a driver; its Results are named `system` (a baseline's driver says "horae")."""
    cwd = BASELINES.get(system or "", REPO)
    log("$ " + " ".join(command) + (f"    (in {cwd})" if cwd != REPO else ""))
    t0 = time.monotonic()
    proc = subprocess.run(command, cwd=cwd, stdout=subprocess.PIPE, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    out = proc.stdout
    results = [Result.from_json(line) for line in out.splitlines() if line.startswith('{"system"')]
    if system is not None:
        for r in results:
            r.system = system
    if proc.returncode != 0:
        log(f"exit {proc.returncode}: {out[-2000:]}")
    return Run(command, time.monotonic() - t0, out, results)


def driver(system: str) -> list[str]:
    if system == "horae":
        return [PY, "-m", "bench.horae_driver"]
    if system in BASELINES:
        return [str(BASELINES[system] / ".venv" / "bin" / "python"), "-m", "bench.horae_driver"]
    return [PEERS_PY, "-m", PEERS[system][0]]


def baseline(rev: str) -> str:
    """Make Horae at `rev` ready to run beside this tree (once per commit); its name."""
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=7", f"{rev}^{{commit}}"],
                         capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    tree = CACHE / sha
    if not (tree / ".venv" / "bin" / "python").exists():
        log(f"baseline {sha}: extracting and installing in {tree}")
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", sha], capture_output=True,
                                 check=True).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        subprocess.run(["make", "venv"], cwd=tree, check=True, stdout=subprocess.DEVNULL)
    name = f"horae@{sha}"
    BASELINES[name] = tree
    return name


def horaes() -> list[str]:
    """Horae as checked out, then each baseline."""
    return ["horae", *BASELINES]


def is_horae(system: str) -> bool:
    return system == "horae" or system.startswith("horae@")


def held(r: Result) -> bool:
    return r.started == r.expected and r.p99 <= LAG_BOUND


def cpu_ms(r: Result) -> float | None:
    """CPU milliseconds per started execution, every process measured."""
    return 1000 * sum(r.cpu_seconds.values()) / r.started if r.cpu_seconds and r.started else None


WAL_NOTE = re.compile(r"WAL ([0-9.]+) KiB per execution")


def wal_kib(r: Result) -> float | None:
    """WAL KiB per execution over every store group (Horae's sustained runs; from the notes
    of a driver older than per-group figures)."""
    done = sum(g.get("executions", 0) for g in r.groups.values())
    if done:
        return sum(g["wal_kib_per_execution"] * g["executions"] for g in r.groups.values()) / done
    found = WAL_NOTE.search(r.notes)
    return float(found.group(1)) if found else None


def spread(values: list[float | None], unit: str = "s", digits: int = 3) -> str:
    """The median of the runs' figures, with their min and max when there are several."""
    xs = [x for x in values if x is not None and not math.isnan(x)]
    if not xs:
        return NONE
    if unit == "/s":  # a rate: 3,000/s (2,500 to 3,750, 3 runs)
        median, low, high = (f"{x:,.0f}" for x in (statistics.median(xs), min(xs), max(xs)))
        median += unit
    else:
        median = fmt(statistics.median(xs), unit, digits)
        low, high = f"{min(xs):.{digits}f}", f"{max(xs):.{digits}f}"
    if len(xs) == 1:
        return median
    return f"{median} ({low} to {high}, {len(xs)} runs)"


def step_up(system: str, first: int, seconds: int, runs: list[Run]) -> Result | None:
    """Sustained capacity: from `first`, up by STEP while held, down while not; the
    highest rate held (None if none was, down to 10/s)."""
    best: Result | None = None
    tried: dict[int, bool] = {}
    rate = first
    while rate >= 10 and rate not in tried and len(tried) < 8:
        # (`system`: a baseline's driver runs in its own tree; from this one it would import
        # this tree's harness, which migrates to this tree's schema, and the baseline's
        # processes would run against today's SQL functions)
        r = run([*driver(system), "--scenario", "sustained", "--rate", str(rate),
                 "--seconds", str(seconds)], timeout=seconds + 900, system=system)  # fmt: skip
        runs.append(r)
        ok = bool(r.results) and held(r.results[-1])
        tried[rate] = ok
        if r.results:
            x = r.results[-1]
            log(f"{system} {rate}/s: started {x.started}/{x.expected}, p99 {x.p99:.3f}s -> "
                f"{'held' if ok else 'not held'}")  # fmt: skip
        if ok:
            best = r.results[-1] if best is None or rate > best.rate else best
            nxt = math.ceil(rate * STEP / 50) * 50 if rate >= 200 else math.ceil(rate * STEP)
            if any(not v and k <= nxt for k, v in tried.items()):
                break  # the next step up already failed
            rate = nxt
        else:
            if best is not None:
                break
            rate = math.floor(rate / STEP / 50) * 50 if rate >= 250 else math.floor(rate / STEP)
    if best is not None and not any(not ok and k > best.rate for k, ok in tried.items()):
        best.notes += "; a lower bound: no higher rate was tried"
    return best


# ---------------------------------------------------------------- reporting


def fmt(x: float | None, unit: str = "s", digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return NONE
    return f"{x:.{digits}f} {unit}".strip()


@functools.cache
def machine() -> str:
    """The machine and versions (read once: every result file repeats them)."""
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((x.split(":", 1)[1].strip() for x in cpuinfo if x.startswith("model name")), "?")
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    mem = next(int(x.split()[1]) for x in meminfo if x.startswith("MemTotal"))

    def version(cmd: list[str]) -> str:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
            return (out.stdout or out.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "?"

    sha = version(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
    rabbit = version(["rabbitmqctl", "-q", "eval", "rabbit_misc:version()."]).strip('"')
    freeze = ""
    if Path(PEERS_PY).exists():
        out = subprocess.run([PEERS_PY, "-m", "pip", "freeze"], capture_output=True, text=True,
                             check=False).stdout  # fmt: skip
        wanted = ("procrastinate", "celery", "apscheduler", "kombu", "sqlalchemy", "psycopg")
        freeze = ", ".join(x for x in out.split() if x.lower().startswith(wanted))
    return "\n".join([
        f"- machine: {os.cpu_count()} cores ({cpu}), {mem / 1024 / 1024:.1f} GiB, "
        f"{platform.platform()}",
        f"- Horae {sha}, Python {platform.python_version()}; "
        f"{version(['psql', '--version'])}; RabbitMQ {rabbit}",
        f"- peers: {freeze or 'not installed'}",
        "- everything (PostgreSQL, RabbitMQ, kube-apiserver + etcd, every process of the "
        "system under test, the load generator) shares this machine",
    ])  # fmt: skip


def result_rows(results: list[Result]) -> list[str]:
    rows = ["| system | scenario | rate or count | started / expected | p50 | p99 | max | "
            "last start after first due | peak RSS per process (MiB) | statements / execution |",
            "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        rss = ", ".join(f"{k} {v:.0f}" for k, v in r.peak_rss_mib.items()) or NONE
        size = f"{r.rate}/s" if r.rate else f"{r.count:,}"
        spe = fmt(r.statements_per_execution, "", 2) if r.statements_per_execution else NONE
        rows.append(f"| {r.system} | {r.scenario} | {size} | {r.started:,} / {r.expected:,} | "
                    f"{fmt(r.p50)} | {fmt(r.p99)} | {fmt(r.max)} | {fmt(r.last_start_s)} | "
                    f"{rss} | {spe} |")  # fmt: skip
    notes = [f"- {r.system} {r.scenario} {f'{r.rate}/s' if r.rate else f'{r.count:,}'}: {r.notes}"
             for r in results if r.notes]  # fmt: skip
    return [*rows, "", *notes] if notes else rows


def cpu_rows(results: list[Result]) -> list[str]:
    """Where the CPU went: CPU milliseconds per started execution, by process (the shared
    servers summed over their processes), over each run's measured window."""
    measured = [r for r in results if r.cpu_seconds and r.started]
    if not measured:
        return []
    names = list(dict.fromkeys(k for r in measured for k in r.cpu_seconds))
    rows = ["## Where the CPU went (CPU ms per started execution)", "",
            "| system | scenario | rate or count | " + " | ".join(names) + " | total |",
            "|---|---|---|" + "---|" * (len(names) + 1)]  # fmt: skip
    for r in measured:
        per = [1000 * r.cpu_seconds.get(n, 0.0) / r.started for n in names]
        size = f"{r.rate}/s" if r.rate else f"{r.count:,}"
        rows.append(f"| {r.system} | {r.scenario} | {size} | "
                    + " | ".join(f"{x:.2f}" for x in per) + f" | {sum(per):.2f} |")  # fmt: skip
    return ["", *rows]


def plot(results: list[Result], path: Path, title: str) -> None:
    """Start-lag CDF and handler starts per second, one line per result."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (cdf, tput) = plt.subplots(1, 2, figsize=(13, 4.5))
    for r in results:
        if not r.lags:
            continue
        label = f"{r.system} {r.scenario} {f'{r.rate}/s' if r.rate else f'{r.count:,}'}"
        lags = sorted(r.lags)
        cdf.plot(lags, [(i + 1) / r.expected for i in range(len(lags))], label=label)
        per_second = starts_per_second(r.starts)
        tput.plot(range(len(per_second)), per_second, label=label)
    cdf.set_xscale("symlog", linthresh=0.1)
    cdf.set_xlabel("start lag: handler start - due (s)")
    cdf.set_ylabel("fraction of expected executions started")
    cdf.axvline(LAG_BOUND, color="grey", linestyle=":")
    cdf.grid(alpha=0.3)
    cdf.legend(fontsize=7)
    tput.set_xlabel("seconds after the first due time")
    tput.set_ylabel("handler starts per second")
    tput.grid(alpha=0.3)
    tput.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write(name: str, title: str, intro: str, runs: list[Run], body: list[str],
          plotted: list[Result] | None = None) -> Path:  # fmt: skip
    day = datetime.now(UTC).date().isoformat()
    path = RESULTS / f"{day}-{name}.md"
    lines = [f"# {title}", "", intro, "", "## Machine and versions", "", machine(), "",
             *body, ""]  # fmt: skip
    if plotted:
        png = path.with_suffix(".png")
        plot(plotted, png, title)
        lines += [f"![{title}]({png.name})", ""]
    lines += ["## Commands", "", "```"]
    lines += [f"{r.shell}    # {r.seconds:.0f} s" for r in runs]
    lines += ["```", ""]
    path.write_text("\n".join(lines))
    log(f"wrote {path.relative_to(REPO)}")
    return path


# ---------------------------------------------------------------- scenarios

Scenario = Callable[[argparse.Namespace], None]


def light(r: Result) -> dict[str, object]:
    """A result without its per-execution lists (for the summary files)."""
    return {**r.__dict__, "lags": [], "starts": [], "p50": r.p50, "p99": r.p99, "max": r.max}


def save(name: str, data: object) -> None:
    """This scenario's figures, for the comparison page (which reads the day's files)."""
    day = datetime.now(UTC).date().isoformat()
    (RESULTS / f"{day}-{name}.json").write_text(json.dumps(data, indent=1, default=str) + "\n")


def load(day: str, name: str) -> Any:
    path = RESULTS / f"{day}-{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def medians(every: list[tuple[int, Result]], what: str, key: Callable[[Result], str],
            cpu: bool = False) -> list[str]:  # fmt: skip
    """A table of the runs' medians (min to max): one row per system and `key` (a spike's
    count, a fault's event)."""
    groups: dict[tuple[str, str], list[Result]] = {}
    for _, x in every:
        groups.setdefault((x.system, key(x)), []).append(x)
    extra = " last start after the due time | CPU per execution |" if cpu else ""
    rows = ["## Figures: the median of the runs (min to max)", "",
            f"| system | {what} | runs | started (fewest) | p50 | p99 | max |{extra}",
            "|---|---|---|---|---|---|---|" + ("---|---|" if cpu else "")]  # fmt: skip
    for (system, name), xs in groups.items():
        fewest = min(xs, key=lambda x: x.started)
        row = (f"| {system} | {name} | {len(xs)} | {fewest.started:,} / {fewest.expected:,} | "
               f"{spread([x.p50 for x in xs])} | {spread([x.p99 for x in xs])} | "
               f"{spread([x.max for x in xs])} |")  # fmt: skip
        if cpu:
            row += (f" {spread([x.last_start_s for x in xs])} | "
                    f"{spread([cpu_ms(x) for x in xs], 'ms', 2)} |")  # fmt: skip
        rows.append(row)
    return rows


def tagged(repeat: int, r: Result) -> dict[str, object]:
    """A result for the day's summary file: without its lists, with its run's number and
    the per-execution CPU and WAL."""
    return {**light(r), "repeat": repeat, "cpu_ms": cpu_ms(r), "wal_kib": wal_kib(r)}


def top(args: argparse.Namespace) -> None:
    runs: list[Run] = []
    counts = [round(20_000 * args.scale), round(100_000 * args.scale)]
    every: list[tuple[int, Result]] = []
    for repeat in range(args.repeat):
        for system in horaes():
            for count in counts:
                lead = 20 + count // 4000  # the creates of 100,000 take ~6 s through the API
                r = run([*driver(system), "--scenario", "top", "--count", str(count),
                         "--lead", str(lead)], system=system)  # fmt: skip
                runs.append(r)
                every += [(repeat, x) for x in r.results]
        for peer in args.peers:
            r = run([*driver(peer), "--scenario", "top", "--count", str(counts[0])],
                    timeout=1800)  # fmt: skip
            runs.append(r)
            every += [(repeat, x) for x in r.results]
    save("top-of-hour", [tagged(n, x) for n, x in every])
    body = medians(every, "due at once", lambda x: f"{x.count:,}", cpu=True)
    results = [x for _, x in every]
    firsts = [x for n, x in every if n == 0]
    write("top-of-hour", "Top of the hour: executions due in the same second",
          f"{counts[0]:,} and {counts[1]:,} one-off executions due at the same instant (10 "
          "tenants, all 64 shards), created ahead through each system's own API; start lag = "
          f"handler start - due. Peers get the smaller spike. {args.repeat} runs of each, "
          "interleaved.", runs,
          [*body, "", "## Every run", "", *result_rows(results), *cpu_rows(results)],
          firsts)  # fmt: skip


def sustained(args: argparse.Namespace) -> None:
    runs: list[Run] = []
    capacity: dict[str, list[Result | None]] = {}
    at_cpu_rate: dict[str, list[tuple[int, Result]]] = {}
    systems = [(h, round(HORAE_FIRST_RATE * args.scale)) for h in horaes()]
    systems += [(p, max(10, round(PEERS[p][1] * args.scale))) for p in args.peers]
    cpu_rate = round(CPU_RATE * args.scale)
    for repeat in range(args.repeat):
        for system, first in systems:
            steps: list[Run] = []
            capacity.setdefault(system, []).append(step_up(system, first, args.seconds, steps))
            runs += steps
            at_cpu_rate.setdefault(system, []).extend(
                (repeat, x) for r in steps for x in r.results if x.rate == cpu_rate
            )
    save("sustained", {
        "capacity": {k: [light(v) if v else None for v in vs] for k, vs in capacity.items()},
        "at_cpu_rate": {k: [tagged(n, x) for n, x in xs] for k, xs in at_cpu_rate.items()},
    })  # fmt: skip
    every = [x for r in runs for x in r.results]
    best = [r for vs in capacity.values() for r in vs[:1] if r is not None]
    body = ["## Capacity (highest rate held: every execution started, p99 start lag <= 1 s)",
            "", "Each figure is the median of the runs (min to max).", "",
            "| system | sustained capacity | lowest of the runs | p99 at capacity | "
            f"CPU per execution at {cpu_rate:,}/s | WAL per execution at {cpu_rate:,}/s |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    for system, vs in capacity.items():
        rates = [float(v.rate) if v else 0.0 for v in vs]
        xs = [x for _, x in at_cpu_rate.get(system, [])]
        body.append(f"| {system} | {spread(list(rates), '/s', 0)} | {min(rates):,.0f}/s | "
                    f"{spread([v.p99 if v else None for v in vs])} | "
                    f"{spread([cpu_ms(x) for x in xs], 'ms', 2)} | "
                    f"{spread([wal_kib(x) for x in xs], 'KiB', 2)} |")  # fmt: skip
    body += ["", "## Every step", "", *result_rows(every), *cpu_rows(every)]
    write("sustained", "Sustained capacity: a constant arrival rate, stepped up",
          f"One-off executions due at a constant rate for {args.seconds} s each step, each "
          "second's arrivals created 2 s ahead through the system's API; the rate is stepped "
          f"by x{STEP} until p99 start lag exceeds {LAG_BOUND:g} s or executions are left "
          f"unstarted, {args.repeat} times for each system. Horae records full history "
          "(every execution row, status, timings). The plot shows each system's capacity in "
          "its first step-up.", runs, body, best)  # fmt: skip


def events(name: str, args: argparse.Namespace, title: str, intro: str) -> None:
    """A scenario of faults under a steady rate (failover, worker-faults), each Horae
    `--repeat` times: per event, the median of the runs' start lags."""
    rate = round(1000 * args.scale)
    runs: list[Run] = []
    every: list[tuple[int, Result]] = []
    for repeat in range(args.repeat):
        for system in horaes():
            r = run([*driver(system), "--scenario", name, "--rate", str(rate)], system=system)
            runs.append(r)
            every += [(repeat, x) for x in r.results]
    save(name, [tagged(n, x) for n, x in every])
    body = medians(every, "event", lambda x: x.scenario)
    results = [x for _, x in every]
    write(name, title, intro.format(rate=rate), runs,
          [*body, "", "## Every run", "", *result_rows(results)],
          [x for n, x in every if n == 0 and x.system == "horae"])  # fmt: skip


def ingest(args: argparse.Namespace) -> None:
    r = run([PY, "-m", "bench.api_ingest", "--seconds", str(max(5, round(10 * args.scale)))])
    save("ingest", [line for line in r.stdout.splitlines() if line.startswith("{")])
    write("ingest", "API ingest: job creates per second",
          "`POST /jobs` (one job per request, 64 concurrent clients) and `POST /jobs:batch` "
          "(1,000 per request) against one `horae api` process.", [r],
          ["## Output", "", "```", r.stdout.strip(), "```"])  # fmt: skip


def scan(args: argparse.Namespace) -> None:
    rows = ",".join(str(round(n * args.scale)) for n in (0, 1_000_000, 10_000_000))
    r = run([PY, "-m", "bench.scan_cost", "--rows", rows], timeout=7200)
    save("scan-cost", [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")])
    write("scan-cost", "Preload cost vs history size",
          "EXPLAIN (ANALYZE, BUFFERS) of the scheduler's preload query with 0, 1 M and 10 M "
          "historical rows spread over 30 daily partitions, plus 1,000 pending rows due within "
          "the window.", [r], ["## Output", "", "```", r.stdout.strip(), "```"])  # fmt: skip


def failover(args: argparse.Namespace) -> None:
    events("failover", args, "Failover: a scheduler SIGKILLed (restarted in place, then "
           "replaced), then a rolling restart",
           "Two schedulers under a steady {rate}/s. At +20 s one is SIGKILLed and started "
           "again under the same identity (the kubelet restarting its container); at +45 s the "
           "other is SIGKILLed and replaced by a new pod; at +75 s both are restarted one after "
           "the other with SIGTERM. Start lags of the executions due in the 20 s after each "
           "event.")  # fmt: skip


def worker_faults(args: argparse.Namespace) -> None:
    events("worker-faults", args, "Worker faults: a worker SIGKILLed, then one frozen",
           "One scheduler and two workers under a steady {rate}/s. At +20 s a worker is "
           "SIGKILLed and started again (as its Deployment would); at +45 s the other is "
           "frozen (SIGSTOP) for 10 s. Start lags of the executions due in the 20 s after each "
           "fault.")  # fmt: skip


SCENARIOS: dict[str, Scenario] = {
    "top": top, "sustained": sustained, "failover": failover, "worker-faults": worker_faults,
    "ingest": ingest, "scan": scan,
}  # fmt: skip


def median(rows: list[dict[str, Any]], key: str) -> float | None:
    xs = [r[key] for r in rows if r.get(key) is not None and not math.isnan(r[key])]
    return statistics.median(xs) if xs else None


def spread_of(rows: list[dict[str, Any]], key: str, unit: str = "s", digits: int = 3) -> str:
    return spread([r.get(key) for r in rows], unit, digits)


def targets(tops: list[dict[str, Any]], cap: dict[str, Any],
            fail: list[dict[str, Any]], faults: list[dict[str, Any]]) -> list[str]:  # fmt: skip
    """Issue 22's targets, each with this run's figure (medians of the runs, min to max) and
    whether it is met. Ratios are against the peers and baselines measured in the same run."""
    out = []

    def row(target: str, measured: str, met: bool | None) -> None:
        out.append(f"| {target} | {measured} | {NONE if met is None else 'yes' if met else 'NO'} |")

    def of(rows: list[dict[str, Any]], system: str, **match: Any) -> list[dict[str, Any]]:
        return [r for r in rows if r["system"] == system
                and all(r.get(k) == v for k, v in match.items())]  # fmt: skip

    counts = sorted({r["count"] for r in of(tops, "horae")})
    if counts:
        small, big = of(tops, "horae", count=counts[0]), of(tops, "horae", count=counts[-1])
        p99 = median(small, "p99")
        row(
            f"{counts[0]:,} due in one second: p99 start lag <= 1 s",
            f"p99 {spread_of(small, 'p99')}, fewest started "
            f"{min(r['started'] for r in small):,}/{small[0]['expected']:,}",
            p99 is not None and p99 <= 1 and all(r["started"] == r["expected"] for r in small),
        )
        last = median(big, "last_start_s")
        row(
            f"{counts[-1]:,} due in one second: all started within 15 s, none lost",
            f"last start {spread_of(big, 'last_start_s')} after the due time, fewest started "
            f"{min(r['started'] for r in big):,}/{big[0]['expected']:,}",
            last is not None and last <= 15 and all(r["started"] == r["expected"] for r in big),
        )
    capacity: dict[str, list[dict[str, Any] | None]] = cap.get("capacity", {})
    at_rate: dict[str, list[dict[str, Any]]] = cap.get("at_cpu_rate", {})
    if "horae" in capacity:
        rates = {k: [float(v["rate"]) if v else 0.0 for v in vs] for k, vs in capacity.items()}
        mine = rates["horae"]
        ok = min(mine) >= 3000 and all(v and v["p99"] <= 1 for v in capacity["horae"])
        base = {k: statistics.median(v) for k, v in rates.items() if k.startswith("horae@")}
        vs_base = "; ".join(f"x{statistics.median(mine) / max(1.0, b):.2f} {k}"
                            for k, b in base.items())  # fmt: skip
        row(
            ">= 3,000/s sustained with full history, p99 <= 1 s, held in every run",
            f"{spread(list(mine), '/s', 0)}, lowest {min(mine):,.0f}/s"
            + (f" ({vs_base}, measured in the same run)" if vs_base else ""),
            ok,
        )
        cpu = [r.get("cpu_ms") for r in at_rate.get("horae", [])]
        cpu_rate = next((r["rate"] for r in at_rate.get("horae", [])), CPU_RATE)
        cpu_median = median(at_rate.get("horae", []), "cpu_ms")
        base_cpu = "; ".join(f"{k} {spread([r.get('cpu_ms') for r in rs], 'ms', 2)}"
                             for k, rs in at_rate.items() if k.startswith("horae@"))  # fmt: skip
        row(
            f"CPU per execution at {cpu_rate:,}/s, every process, <= 0.6 ms",
            spread(cpu, "ms", 2) + (f" (baseline: {base_cpu})" if base_cpu else ""),
            cpu_median is not None and cpu_median <= 0.6,
        )
        wal = median(at_rate.get("horae", []), "wal_kib")
        row(
            f"WAL per execution at {cpu_rate:,}/s <= 1.5 KiB",
            spread([r.get("wal_kib") for r in at_rate.get("horae", [])], "KiB", 2),
            wal is not None and wal <= 1.5,
        )
        peers = {k: statistics.median(v) for k, v in rates.items() if not is_horae(k)}
        if peers:
            best = max(peers, key=lambda k: peers[k])
            p99s = [v["p99"] for v in capacity["horae"] if v]
            peer_p99 = [v["p99"] for v in capacity[best] if v]
            no_worse = bool(p99s and peer_p99) and statistics.median(p99s) <= max(
                statistics.median(peer_p99), LAG_BOUND
            )
            row(">= 2.5x the best peer's sustained capacity, p99 no worse",
                f"Horae {statistics.median(mine):,.0f}/s vs {best} {peers[best]:,.0f}/s "
                f"(x{statistics.median(mine) / max(1.0, peers[best]):.2f})",
                statistics.median(mine) >= 2.5 * peers[best] and no_worse)  # fmt: skip
    for event, what in (("failover-kill", "a scheduler SIGKILLed, restarted in place"),
                        ("failover-replaced", "a scheduler SIGKILLed, replaced"),
                        ("worker-kill", "a worker SIGKILLed"),
                        ("worker-freeze", "a worker frozen 10 s")):  # fmt: skip
        rows = of([*fail, *faults], "horae", scenario=event)
        if rows:
            worst = median(rows, "max")
            row(
                f"{what}, under 1,000/s: max start lag <= 3 s",
                f"max {spread_of(rows, 'max')}, p99 {spread_of(rows, 'p99')}",
                worst is not None and worst <= 3,
            )
    rows = of(fail, "horae", scenario="failover-rolling")
    if rows:
        row(
            "rolling restart of the schedulers under 1,000/s (no target: reported)",
            f"max {spread_of(rows, 'max')}, p99 {spread_of(rows, 'p99')}",
            None,
        )
    return out


def comparison(day: str, repeat: int) -> None:
    """bench/results/README.md: the one-page table and the targets, from the day's files."""
    tops: list[dict[str, Any]] = load(day, "top-of-hour") or []
    cap: dict[str, Any] = load(day, "sustained") or {}
    capacity: dict[str, list[dict[str, Any] | None]] = cap.get("capacity", {})
    fail = load(day, "failover") or []
    faults = load(day, "worker-faults") or []
    lines = ["# Benchmark results", "",
             f"Latest full run: {day} (`make bench`), one machine, everything on it:", "",
             machine(), "",
             "## Horae and its peers: same load, same machine, "
             f"{repeat} run{'s' if repeat > 1 else ''} of each", "",
             "Each figure is the median of the runs (min to max).", "",
             "| system | sustained capacity (every execution started, p99 start lag <= 1 s) "
             "| p99 at capacity | top of the hour, 20,000 due: p99 / max start lag "
             "| fewest started | peak RSS, all processes (MiB) |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    small = min((r["count"] for r in tops), default=0)
    for system in dict.fromkeys([*capacity, *(r["system"] for r in tops)]):
        cs = capacity.get(system)
        ts = [r for r in tops if r["system"] == system and r["count"] == small]
        rates = spread([float(v["rate"]) if v else 0.0 for v in cs], "/s", 0) if cs else NONE
        at_capacity = spread([v["p99"] if v else None for v in cs]) if cs else NONE
        spike = f"{spread_of(ts, 'p99')} / {spread_of(ts, 'max')}" if ts else NONE
        started = (f"{min(r['started'] for r in ts):,} / {ts[0]['expected']:,}" if ts
                   else NONE)  # fmt: skip
        rss = [sum(v for v in r["peak_rss_mib"].values() if v == v) for r in ts]
        lines.append(f"| {system} | {rates} | {at_capacity} | {spike} | {started} | "
                     f"{spread(list(rss), '', 0)} |")  # fmt: skip
    lines += ["", "## Targets (issue 22)", "", "| target | measured | met |", "|---|---|---|"]
    lines += targets(tops, cap, fail, faults)
    lines += ["", "Per scenario, with the commands, every step and the plots:", ""]
    lines += [f"- [{p.stem}]({p.name})" for p in sorted(RESULTS.glob(f"{day}-*.md"))]
    (RESULTS / "README.md").write_text("\n".join(lines) + "\n")
    log(f"wrote {(RESULTS / 'README.md').relative_to(REPO)}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seconds", type=int, default=120, help="per sustained step")
    parser.add_argument("--only", default=",".join(SCENARIOS))
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each scenario but ingest and scan")  # fmt: skip
    parser.add_argument("--baseline", action="append", default=[], metavar="REV",
                        help="also measure Horae at this commit, in the same run")  # fmt: skip
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat: at least 1")
    args.peers = [p for p in args.peers.split(",") if p]
    unknown = [p for p in args.peers if p not in PEERS]
    if unknown:
        parser.error(f"--peers: unknown {', '.join(unknown)} (known: {', '.join(PEERS)})")
    if args.peers and not Path(PEERS_PY).exists():
        parser.error("--peers: .venv-peers is missing (make peers-venv)")
    only = [s for s in args.only.split(",") if s]
    if bad := [s for s in only if s not in SCENARIOS]:
        parser.error(f"--only: unknown {', '.join(bad)} (known: {', '.join(SCENARIOS)})")
    RESULTS.mkdir(parents=True, exist_ok=True)
    for rev in args.baseline:
        baseline(rev)
    t0 = time.monotonic()
    for name in only:
        SCENARIOS[name](args)
    comparison(datetime.now(UTC).date().isoformat(), args.repeat)
    log(f"done in {(time.monotonic() - t0) / 60:.1f} min")


if __name__ == "__main__":
    main()

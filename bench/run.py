"""`make bench`: every scenario of the benchmark suite, Horae and its peers, one after the
other on this machine; writes `bench/results/<date>-<scenario>.md`, PNG plots beside them
and the one-page comparison `bench/results/README.md`. Results are data, not assertions.

    .venv/bin/python -m bench.run [--scale 1.0] [--only top,sustained,failover,ingest,scan]
                                  [--peers procrastinate,celery,apscheduler] [--seconds 120]

Scenarios (issue 8): top of the hour (20,000 and 50,000 due in one second), sustained
capacity (a constant rate for --seconds, stepped until p99 start lag exceeds 1 s), API
ingest, preload cost vs history (0, 1 M, 10 M rows), failover (a SIGKILL restarted in place,
one replaced, a rolling restart).
`--scale` multiplies the counts, rates and history sizes.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import shlex
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


def run(command: list[str], timeout: float = 3600) -> Run:
    log("$ " + " ".join(command))
    t0 = time.monotonic()
    proc = subprocess.run(command, cwd=REPO, stdout=subprocess.PIPE, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    out = proc.stdout
    results = [Result.from_json(line) for line in out.splitlines() if line.startswith('{"system"')]
    if proc.returncode != 0:
        log(f"exit {proc.returncode}: {out[-2000:]}")
    return Run(command, time.monotonic() - t0, out, results)


def driver(system: str) -> list[str]:
    if system == "horae":
        return [PY, "-m", "bench.horae_driver"]
    return [PEERS_PY, "-m", PEERS[system][0]]


def held(r: Result) -> bool:
    return r.started == r.expected and r.p99 <= LAG_BOUND


def step_up(system: str, first: int, seconds: int, runs: list[Run]) -> Result | None:
    """Sustained capacity: from `first`, up by STEP while held, down while not; the
    highest rate held (None if none was, down to 10/s)."""
    best: Result | None = None
    tried: dict[int, bool] = {}
    rate = first
    while rate >= 10 and rate not in tried and len(tried) < 8:
        r = run([*driver(system), "--scenario", "sustained", "--rate", str(rate),
                 "--seconds", str(seconds)], timeout=seconds + 900)  # fmt: skip
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


def top(args: argparse.Namespace) -> None:
    runs: list[Run] = []
    counts = [round(20_000 * args.scale), round(50_000 * args.scale)]
    for count in counts:
        runs.append(run([*driver("horae"), "--scenario", "top", "--count", str(count)]))
    for peer in args.peers:
        runs.append(run([*driver(peer), "--scenario", "top", "--count", str(counts[0])],
                        timeout=1800))  # fmt: skip
    results = [x for r in runs for x in r.results]
    save("top-of-hour", [light(x) for x in results])
    write("top-of-hour", "Top of the hour: executions due in the same second",
          f"{counts[0]:,} and {counts[1]:,} one-off executions due at the same instant (10 "
          "tenants, all 64 shards), created ahead through each system's own API; start lag = "
          "handler start - due. Peers get the smaller spike.", runs,
          ["## Figures", "", *result_rows(results), *cpu_rows(results)], results)  # fmt: skip


def sustained(args: argparse.Namespace) -> None:
    runs: list[Run] = []
    capacity: dict[str, Result | None] = {}
    systems = [("horae", round(HORAE_FIRST_RATE * args.scale))]
    systems += [(p, max(10, round(PEERS[p][1] * args.scale))) for p in args.peers]
    for system, first in systems:
        capacity[system] = step_up(system, first, args.seconds, runs)
    save("sustained", {k: light(v) if v else None for k, v in capacity.items()})
    every = [x for r in runs for x in r.results]
    best = [r for r in capacity.values() if r is not None]
    body = ["## Capacity (highest rate held: every execution started, p99 start lag <= 1 s)",
            "", "| system | sustained capacity | p50 | p99 | max | statements / execution |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    for system, r in capacity.items():
        if r is None:
            body.append(f"| {system} | none held (lowest tried failed) | - | - | - | - |")
            continue
        spe = fmt(r.statements_per_execution, "", 2) if r.statements_per_execution else NONE
        body.append(f"| {system} | {r.rate:,}/s | {fmt(r.p50)} | {fmt(r.p99)} | {fmt(r.max)} "
                    f"| {spe} |")  # fmt: skip
    body += ["", "## Every step", "", *result_rows(every), *cpu_rows(every)]
    write("sustained", "Sustained capacity: a constant arrival rate, stepped up",
          f"One-off executions due at a constant rate for {args.seconds} s each step, each "
          "second's arrivals created 2 s ahead through the system's API; the rate is stepped "
          f"by x{STEP} until p99 start lag exceeds {LAG_BOUND:g} s or executions are left "
          "unstarted. Horae records full history (every execution row, status, timings).",
          runs, body, best)  # fmt: skip


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
    rate = round(1000 * args.scale)
    r = run([*driver("horae"), "--scenario", "failover", "--rate", str(rate)])
    save("failover", [light(x) for x in r.results])
    write("failover", "Failover: a scheduler SIGKILLed (restarted in place, then replaced), "
          "then a rolling restart",
          f"Two schedulers under a steady {rate}/s. At +20 s one is SIGKILLed and started "
          "again under the same identity (the kubelet restarting its container); at +45 s the "
          "other is SIGKILLed and replaced by a new pod; at +75 s both are restarted one after "
          "the other with SIGTERM. Start lags of the executions due in the 20 s after each "
          "event.", [r],
          ["## Figures", "", *result_rows(r.results)], r.results)  # fmt: skip


SCENARIOS: dict[str, Scenario] = {
    "top": top, "sustained": sustained, "failover": failover, "ingest": ingest, "scan": scan,
}  # fmt: skip


def targets(tops: dict[tuple[str, int], dict[str, Any]], cap: dict[str, Any],
            scan_rows: list[dict[str, Any]], fail: list[dict[str, Any]]) -> list[str]:  # fmt: skip
    """The issue's targets, each with this run's figure and whether it is met."""
    out = []

    def row(target: str, measured: str, met: bool | None) -> None:
        out.append(f"| {target} | {measured} | {NONE if met is None else 'yes' if met else 'NO'} |")

    horae = {n: r for (s, n), r in tops.items() if s == "horae"}
    if horae:
        small, big = min(horae), max(horae)
        a, b = horae[small], horae[big]
        row(f"top of the hour, {small:,} due in one second: p99 start lag <= 2 s",
            f"p99 {fmt(a['p99'])}, {a['started']:,}/{a['expected']:,} started",
            a["p99"] <= 2 and a["started"] == a["expected"])  # fmt: skip
        row(f"top of the hour, {big:,}: all started within 10 s",
            f"last started {fmt(b['last_start_s'])} after the due time, "
            f"{b['started']:,}/{b['expected']:,}",
            b["last_start_s"] <= 10 and b["started"] == b["expected"])  # fmt: skip
    if "horae" in cap:
        h: dict[str, Any] = cap["horae"] or {}  # empty: no rate held
        rate: int = h.get("rate", 0)
        row("sustained capacity >= 2,000/s with full history, p99 <= 1 s",
            f"{rate:,}/s, p99 {fmt(h['p99'])}" if h else "none held",
            rate >= 2000)  # fmt: skip
        spe: float | None = h.get("statements_per_execution")
        row("Postgres statements per execution <= 1.5 (pg_stat_statements, at capacity)",
            fmt(spe, "", 2) if spe else NONE, spe is not None and spe <= 1.5)  # fmt: skip
        peers = {k: (v or {}).get("rate", 0) for k, v in cap.items() if k != "horae"}
        if peers:
            best = max(peers, key=lambda k: peers[k])
            row(">= 3x the best peer's sustained capacity, p99 no worse",
                f"Horae {rate:,}/s vs {best} {peers[best]:,}/s "
                f"(x{rate / max(1, peers[best]):.1f})",
                rate >= 3 * peers[best])  # fmt: skip
    if scan_rows:
        base, mid, top_ = scan_rows[0], scan_rows[len(scan_rows) // 2], scan_rows[-1]
        ratio = top_["ms"] / max(0.001, base["ms"])
        row(f"preload cost at {top_['rows']:,} history rows within 1.5x of 0 (execution time; "
            "buffers for the record)",
            f"{base['ms']:.2f} -> {top_['ms']:.2f} ms (x{ratio:.2f}); buffers {base['buffers']} "
            f"at 0, {mid['buffers']} at {mid['rows']:,}, {top_['buffers']} at {top_['rows']:,}",
            ratio <= 1.5)  # fmt: skip
    for r in fail:
        row(f"{r['scenario']}: every execution started (no target: reported)",
            f"{r['started']:,}/{r['expected']:,}, p99 {fmt(r['p99'])}, max {fmt(r['max'])}",
            None)  # fmt: skip
    return out


def comparison(day: str) -> None:
    """bench/results/README.md: the one-page table and the targets, from the day's files."""
    tops = {(r["system"], r["count"]): r for r in load(day, "top-of-hour") or []}
    cap: dict[str, dict[str, Any] | None] = load(day, "sustained") or {}
    scan_rows = load(day, "scan-cost") or []
    fail = load(day, "failover") or []
    lines = ["# Benchmark results", "",
             f"Latest full run: {day} (`make bench`), one machine, everything on it:", "",
             machine(), "", "## Horae and its peers: same load, same machine, one run", "",
             "| system | sustained capacity (every execution started, p99 start lag <= 1 s) "
             "| p99 at capacity | top of the hour, 20,000 due: p99 / max start lag "
             "| started | peak RSS, all processes (MiB) |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    small = min((n for _, n in tops), default=0)
    for system in dict.fromkeys([*cap, *(s for s, _ in tops)]):
        c, t = cap.get(system), tops.get((system, small))
        capacity = f"{c['rate']:,}/s" if c else "none held" if system in cap else NONE
        at_capacity = fmt(c["p99"]) if c else NONE
        spike = f"{fmt(t['p99'])} / {fmt(t['max'])}" if t else NONE
        started = f"{t['started']:,} / {t['expected']:,}" if t else NONE
        rss = sum(v for v in t["peak_rss_mib"].values() if v == v) if t else math.nan
        lines.append(f"| {system} | {capacity} | {at_capacity} | {spike} | {started} | "
                     f"{fmt(rss, '', 0)} |")  # fmt: skip
    lines += ["", "## Targets (issue 8)", "", "| target | measured | met |", "|---|---|---|"]
    lines += targets(tops, cap, scan_rows, fail)
    lines += ["", "Per scenario, with the commands, every step and the plots:", ""]
    lines += [f"- [{p.stem}]({p.name})" for p in sorted(RESULTS.glob(f"{day}-*.md"))]
    (RESULTS / "README.md").write_text("\n".join(lines) + "\n")
    log("wrote bench/results/README.md")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seconds", type=int, default=120, help="per sustained step")
    parser.add_argument("--only", default=",".join(SCENARIOS))
    parser.add_argument("--peers", default=",".join(PEERS))
    args = parser.parse_args()
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
    t0 = time.monotonic()
    for name in only:
        SCENARIOS[name](args)
    comparison(datetime.now(UTC).date().isoformat())
    log(f"done in {(time.monotonic() - t0) / 60:.1f} min")


if __name__ == "__main__":
    main()

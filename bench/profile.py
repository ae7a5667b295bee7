"""Where Horae's processes spend their CPU under sustained load, or in a top-of-the-hour
spike: py-spy, sampled from the outside while the same load as `bench.horae_driver
--scenario sustained` (or `--scenario top`) runs.

    .venv/bin/python -m bench.profile --rate 1500 --seconds 60 --sample 30
    .venv/bin/python -m bench.profile --spike 20000 --sample 6

One API, one scheduler and two workers (64 handlers each), as in the sustained scenario.
Once the load has run 10 s, every process (and, from /proc, PostgreSQL, RabbitMQ and the
control plane) is sampled for `--sample` seconds: py-spy at 100 Hz, `--gil`: only the
thread holding the GIL is sampled, so samples are the process's Python CPU time (C code
that releases the GIL, such as TLS or a blocking read, is not counted). Writes
bench/results/<date>-profile.md (-profile-2.md, ... after the day's first: an earlier one
is never overwritten): each process's CPU seconds in the window, and its top functions by
own time and by time including what they call, and prints it; the raw collapsed stacks
(for flame graphs) stay in a temporary directory the run names.

With `--spike N`, N executions due at one instant (created 20 s ahead) are sampled from
2 s before that instant (the scheduler's dispatch lead) for `--sample` seconds, with every
process's CPU per half second beside; writes bench/results/<date>-profile-spike.md.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from bench.harness import REPO, pct
from bench.horae_driver import lags, log, settle, spike_load, steady_load
from bench.load import cpu_delta, cpu_snapshot

RESULTS = REPO / "bench" / "results"
PY_SPY = str(Path(sys.executable).parent / "py-spy")
WARM_UP = 10.0
TOP = 15


def fresh(name: str) -> Path:
    """bench/results/<name>.md, or <name>-2.md, -3.md, ... when a run of the same day wrote
    it already: a profile a document cites is never overwritten by a later one."""
    path, n = RESULTS / f"{name}.md", 1
    while path.exists():
        n += 1
        path = RESULTS / f"{name}-{n}.md"
    return path


def frame_name(frame: str) -> str:
    """`claim_many (horae/store/executions.py:254)` -> `claim_many (horae/store/executions.py)`:
    one entry per function, whichever of its lines was running."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "lib/python3.11/", str(REPO) + "/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{name} ({path})" if path else name


def summarise(collapsed: str) -> tuple[int, Counter[str], Counter[str]]:
    """(samples, own samples by function, samples including callees by function) of py-spy's
    raw output: one `frame;frame;...;leaf count` line per distinct stack."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [frame_name(f) for f in stack.split(";") if f and not f.startswith("process ")]
        frames = [f for f in frames if not f.startswith("thread ")]
        if not frames:
            continue
        n = int(count)
        total += n
        own[frames[-1]] += n
        for name in set(frames):
            inclusive[name] += n
    return total, own, inclusive


async def record(pid: int, seconds: float, out: Path) -> str:
    proc = await asyncio.create_subprocess_exec(
        PY_SPY, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "100",
        "--format", "raw", "--output", str(out), "--nonblocking", "--gil",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await proc.communicate()
    if proc.returncode != 0:
        log(f"py-spy on {pid}: {err.decode().strip()[-300:]}")
        return ""
    return await asyncio.to_thread(out.read_text)


ENTRY_POINTS = ("(horae/cli/main.py)", "(horae/cli/support.py)", "(horae/__main__.py)")


def ours(counts: Counter[str]) -> Counter[str]:
    """Horae's own functions (its command-line entry points aside, which every sample
    passes through): where in our code the time is spent, callees included."""
    return Counter({name: n for name, n in counts.items()
                    if "(horae/" in name and not name.endswith(ENTRY_POINTS)})  # fmt: skip


def table(total: int, counts: Counter[str]) -> list[str]:
    rows = ["| share | function |", "|---:|---|"]
    rows += [
        f"| {100 * n / max(1, total):.1f} % | `{name}` |" for name, n in counts.most_common(TOP)
    ]
    return rows


async def run(rate: int, seconds: int, sample: float) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d")
    raw = Path(tempfile.mkdtemp(prefix="horae-profile-"))
    async with steady_load("profile", rate, seconds, schedulers=1) as load:
        feeding = asyncio.create_task(load.feed())
        await load.until(WARM_UP)
        pids = load.system.pids()
        log(f"sampling {', '.join(pids)} for {sample:g} s at {rate}/s")
        before = cpu_snapshot(pids)
        stacks = await asyncio.gather(*(
            record(pid, sample, raw / f"{name}.txt") for name, pid in pids.items()
        ))  # fmt: skip
        cpu = cpu_delta(before, cpu_snapshot(pids))
        await feeding
        await load.settle()
    log(f"collapsed stacks in {raw}")

    lines = [
        f"# Profile under sustained load ({stamp})",
        "",
        f"`.venv/bin/python -m bench.profile --rate {rate} --seconds {seconds} "
        f"--sample {sample:g}`: {rate} executions/s for {seconds} s (1 API, 1 scheduler, "
        f"2 workers x 64 handlers), every process sampled by py-spy at 100 Hz for "
        f"{sample:g} s from {WARM_UP:g} s into the load (`--gil`: the thread holding "
        "the GIL, i.e. Python CPU time).",
        "",
        *cpu_table(cpu, sample),
    ]  # fmt: skip
    lines += process_tables(pids, stacks, sample)
    text = "\n".join(lines) + "\n"
    path = fresh(f"{stamp}-profile")
    path.write_text(text)
    log(f"wrote {path.relative_to(REPO)}")
    return text


def cpu_table(cpu: dict[str, float], sample: float) -> list[str]:
    return [
        f"## CPU seconds in the {sample:g} s window",
        "",
        "| process | CPU s | cores |",
        "|---|---:|---:|",
        *(f"| {name} | {secs:.1f} | {secs / sample:.2f} |"
          for name, secs in sorted(cpu.items(), key=lambda kv: -kv[1]) if secs > 0),
    ]  # fmt: skip


def process_tables(pids: dict[str, int], stacks: list[str], sample: float) -> list[str]:
    lines: list[str] = []
    for (name, _pid), collapsed in zip(pids.items(), stacks, strict=True):
        total, own, inclusive = summarise(collapsed)
        lines += ["", f"## {name}: {total} samples ({total / 100 / sample:.2f} of a core)", ""]
        lines += ["Own time (the function itself held the GIL):", "", *table(total, own), ""]
        lines += ["Horae's functions, including what they call:", "",
                  *table(total, ours(inclusive))]  # fmt: skip
    return lines


SPIKE_FROM = 2.0
"""Seconds before the due instant the spike's sampling starts (covers a dispatch lead of up
to 2 s, when one is set)."""
TICK = 0.5


async def timeline(pids: dict[str, int], seconds: float, due: datetime) -> list[str]:
    """A table row per TICK: seconds from the due instant, and each process's CPU seconds."""
    rows: list[tuple[float, dict[str, float]]] = []
    before = cpu_snapshot(pids)
    for _ in range(round(seconds / TICK)):
        await asyncio.sleep(TICK)
        now = cpu_snapshot(pids)
        rows.append(((datetime.now(UTC) - due).total_seconds(), cpu_delta(before, now)))
        before = now
    names = [n for n in sorted(rows[0][1]) if any(r[n] > 0 for _, r in rows)] if rows else []
    out = ["| s from due | " + " | ".join(names) + " | total |",
           "|---:|" + "---:|" * (len(names) + 1)]  # fmt: skip
    for at, cpu in rows:
        cells = " | ".join(f"{cpu[n]:.2f}" for n in names)
        out.append(f"| {at:+.1f} | {cells} | {sum(cpu.values()):.2f} |")
    return out


async def run_spike(count: int, sample: float) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d")
    raw = Path(tempfile.mkdtemp(prefix="horae-profile-"))
    async with spike_load(count, lead=20) as spike:
        pids = spike.system.pids()
        wait = (spike.due - datetime.now(UTC)).total_seconds() - SPIKE_FROM
        await asyncio.sleep(max(0.0, wait))
        log(f"sampling {', '.join(pids)} for {sample:g} s around the spike of {count}")
        before = cpu_snapshot(pids)
        recording = [record(pid, sample, raw / f"{name}.txt") for name, pid in pids.items()]
        stacks, ticks = await asyncio.gather(
            asyncio.gather(*recording), timeline(pids, sample, spike.due)
        )
        cpu = cpu_delta(before, cpu_snapshot(pids))
        await settle(spike.stores, count, spike.due, grace=120)
        lag, _, _ = await lags(spike.stores, spike.due)
    log(f"collapsed stacks in {raw}")
    lines = [
        f"# Profile of a top-of-the-hour spike ({stamp})",
        "",
        f"`.venv/bin/python -m bench.profile --spike {count} --sample {sample:g}`: {count} "
        "executions due at one instant, created through the API 20 s ahead (1 API, 1 "
        "scheduler, 2 workers x 64 handlers), every process sampled by py-spy at 100 Hz "
        f"for {sample:g} s from {SPIKE_FROM:g} s before the due instant (`--gil`: Python "
        "CPU time).",
        "",
        f"Start lag: p50 {pct(lag, 50):.3f} s, p99 {pct(lag, 99):.3f} s, max {max(lag):.3f} s "
        f"({len(lag)} started).",
        "",
        f"## CPU seconds per {TICK:g} s (2 cores: at most {2 * TICK:g} in all)",
        "",
        *ticks,
        "",
        *cpu_table(cpu, sample),
        *process_tables(pids, list(stacks), sample),
    ]  # fmt: skip
    text = "\n".join(lines) + "\n"
    path = fresh(f"{stamp}-profile-spike")
    path.write_text(text)
    log(f"wrote {path.relative_to(REPO)}")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=1500)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--sample", type=float, default=30.0)
    parser.add_argument("--spike", type=int, default=0, help="profile N due at one instant")
    args = parser.parse_args()
    if shutil.which(PY_SPY) is None:
        raise SystemExit(f"{PY_SPY} missing: pip install -e '.[bench]'")
    if args.spike:
        print(asyncio.run(run_spike(args.spike, args.sample)))
        return
    if args.seconds < WARM_UP + args.sample:
        raise SystemExit(f"--seconds must cover the warm-up ({WARM_UP:g} s) and --sample")
    print(asyncio.run(run(args.rate, args.seconds, args.sample)))


if __name__ == "__main__":
    main()

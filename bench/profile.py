"""Where Horae's processes spend their CPU under sustained load: py-spy, sampled from the
outside while the same load as `bench.horae_driver --scenario sustained` runs.

    .venv/bin/python -m bench.profile --rate 1500 --seconds 60 --sample 30

One API, one scheduler and two workers (64 handlers each), as in the sustained scenario.
Once the load has run 10 s, every process (and, from /proc, PostgreSQL, RabbitMQ and the
control plane) is sampled for `--sample` seconds: py-spy at 100 Hz, `--gil`: only the
thread holding the GIL is sampled, so samples are the process's Python CPU time (C code
that releases the GIL, such as TLS or a blocking read, is not counted). Writes
bench/results/<date>-profile.md: each process's CPU seconds in the window, and its top
functions by own time and by time including what they call, and prints it; the raw
collapsed stacks (for flame graphs) stay in a temporary directory the run names.
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

from bench.harness import REPO
from bench.horae_driver import log, steady_load
from bench.load import cpu_delta, cpu_snapshot

RESULTS = REPO / "bench" / "results"
PY_SPY = str(Path(sys.executable).parent / "py-spy")
WARM_UP = 10.0
TOP = 15


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


ENTRY_POINTS = ("(horae/cli.py)", "(horae/cli_support.py)", "(horae/__main__.py)")


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
        f"## CPU seconds in the {sample:g} s window",
        "",
        "| process | CPU s | cores |",
        "|---|---:|---:|",
        *(f"| {name} | {secs:.1f} | {secs / sample:.2f} |"
          for name, secs in sorted(cpu.items(), key=lambda kv: -kv[1]) if secs > 0),
    ]  # fmt: skip
    for (name, _pid), collapsed in zip(pids.items(), stacks, strict=True):
        total, own, inclusive = summarise(collapsed)
        lines += ["", f"## {name}: {total} samples ({total / 100 / sample:.2f} of a core)", ""]
        lines += ["Own time (the function itself held the GIL):", "", *table(total, own), ""]
        lines += ["Horae's functions, including what they call:", "",
                  *table(total, ours(inclusive))]  # fmt: skip
    text = "\n".join(lines) + "\n"
    (RESULTS / f"{stamp}-profile.md").write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=1500)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--sample", type=float, default=30.0)
    args = parser.parse_args()
    if shutil.which(PY_SPY) is None:
        raise SystemExit(f"{PY_SPY} missing: pip install -e '.[bench]'")
    if args.seconds < WARM_UP + args.sample:
        raise SystemExit(f"--seconds must cover the warm-up ({WARM_UP:g} s) and --sample")
    print(asyncio.run(run(args.rate, args.seconds, args.sample)))


if __name__ == "__main__":
    main()

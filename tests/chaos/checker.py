"""The history checker: what was promised, what ran, what Postgres says; pure logic.

Inputs, all read after the run:
- promises: every create the API acknowledged (job, tenant, the nominal fire times it
  owes in the checked window);
- invocations: every handler start, with its end, failure or stop, from the workers' history
  files (worker identity, execution id, idempotency key, real start time);
- faults: what was done to whom and when;
- observations: Postgres sampled during the run (terminal statuses, shard epochs,
  running executions per tenant) and its final state.

Invariants (a violation fails the run): lost = 0, double claims = 0, unexplained
duplicates = 0, stuck = 0, terminal statuses changed = 0, epochs backwards = 0,
tenant limits exceeded = 0, phantom runs = 0, start lag p99 of executions no fault
touched <= 2 s. Duplicates that a fault explains are counted and reported.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

WORKER_FAULTS = {"kill", "pause", "term", "clock"}
"""Faults aimed at one process: they explain a duplicate of a run that process held."""
GLOBAL_FAULTS = {"pg_restart", "pg_terminate", "mq_restart", "partition", "group_down"}
"""Faults that can cut any process's writes: they explain a duplicate of any run. (A move
of shards between store groups is not one: it must not duplicate anything.)"""
HOST_STALL = "host_stall"
"""Not injected: the harness's own timer woke at least STALL_SECONDS late, so every
process on the machine may have been held up (a VM descheduled, the host overloaded).
Runs it overlaps are not judged for start lag (they are reported apart); it explains no
duplicate."""
STALL_SECONDS = 1.0
LAG_LIMIT = 2.0
LAG_MARGIN = 5.0
"""A fault this long before a run's due time counts as touching it: a crashed scheduler's
shards move within lease + renew period (3 + 1 s in the suite)."""
WHOLE_LIMIT = 5.0
"""Issue 22: after any fault or pair of faults, every run starts within this long of the
system being whole again (reported, not judged: the touched runs' lags)."""


@dataclass(frozen=True)
class Promise:
    """An acknowledged create and the fire times it owes (epoch seconds)."""

    job_id: str
    tenant: str
    kind: str
    occurrences: tuple[float, ...]
    acked_at: float
    valid: tuple[float, ...] = ()
    """Fire times of the job outside the checked window that may run too (cron jobs: all
    of its nominal times); an invocation at any other time is a phantom."""


@dataclass(frozen=True)
class Invocation:
    execution_id: str
    job_id: str
    attempt: int
    occurrence_at: float
    due_at: float
    tenant: str
    worker: str
    at: float
    ended_at: float | None = None
    failed: bool = False
    """The handler raised on purpose (a retryable failure the workload asked for)."""

    @property
    def key(self) -> tuple[str, float]:
        return (self.job_id, round(self.occurrence_at, 3))


@dataclass(frozen=True)
class Fault:
    kind: str
    target: str
    """A component identity (`worker-3`), or `postgres`, `rabbitmq`, `scheduler-2`..."""
    start: float
    end: float
    detail: str = ""
    """What was drawn for it, where there is a choice (a clock fault's offset, a restart's
    mode)."""


@dataclass(frozen=True)
class Sample:
    """Postgres, seen at one moment of the run."""

    at: float
    terminal: Mapping[str, str] = field(default_factory=dict)
    """execution id -> terminal status"""
    epochs: Mapping[int, int] = field(default_factory=dict)
    running: Mapping[str, int] = field(default_factory=dict)
    """tenant -> executions running"""


@dataclass(frozen=True)
class History:
    promises: Sequence[Promise]
    invocations: Sequence[Invocation]
    faults: Sequence[Fault]
    samples: Sequence[Sample]
    final: Mapping[str, str]
    """execution id -> status, after quiescence"""
    limits: Mapping[str, int]
    lease_seconds: float
    withdrawn: frozenset[tuple[str, float]] = frozenset()
    """(job id, occurrence) of limited tenants' executions still waiting for a slot when
    their job was cancelled, and cancelled with it: not owed any more."""


@dataclass
class Report:
    promised: int = 0
    invocations: int = 0
    lost: list[str] = field(default_factory=list)
    withdrawn: int = 0
    double_claims: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    """Explained: the first run's owner was faulted."""
    unexplained_duplicates: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    changed_terminal: list[str] = field(default_factory=list)
    epochs_backwards: list[str] = field(default_factory=list)
    over_limit: list[str] = field(default_factory=list)
    phantoms: list[str] = field(default_factory=list)
    lag_samples: int = 0
    lag_p50: float = 0.0
    lag_p99: float = 0.0
    lag_max: float = 0.0
    late: list[str] = field(default_factory=list)
    """The untouched first runs that started more than LAG_LIMIT late, each with the faults
    that ended in the 30 s before its LAG_MARGIN began (what to read first when the lag
    fails)."""
    touched_lags: list[float] = field(default_factory=list)
    """Start lags of the first runs a fault touched (reported, not judged: how late a
    fault made them, against issue 22's seconds after the system is whole)."""
    after_whole: list[float] = field(default_factory=list)
    """For the same runs, how long after the system was whole again each started: its
    start less the later of its due time and the end of the last fault touching it (issue
    22: within 5 s after any fault or pair of faults)."""
    slow_after_whole: list[str] = field(default_factory=list)
    """The runs of `after_whole` that started more than WHOLE_LIMIT after it, each with
    the faults that touched it (what to read first about them)."""
    faults: dict[str, int] = field(default_factory=dict)
    stalls: list[float] = field(default_factory=list)
    """How long each host stall lasted (`HOST_STALL`)."""

    @property
    def ok(self) -> bool:
        return not (
            self.lost or self.double_claims or self.unexplained_duplicates or self.stuck
            or self.changed_terminal or self.epochs_backwards or self.over_limit
            or self.phantoms
        ) and self.lag_p99 <= LAG_LIMIT  # fmt: skip

    def format(self, limit: int = 10) -> str:
        def line(name: str, items: list[str], must_be_zero: bool = True) -> list[str]:
            flag = "" if not must_be_zero else ("  ok" if not items else "  VIOLATION")
            out = [f"{name:<34}{len(items):>8}{flag}"]
            out += [f"    {item}" for item in items[:limit]]
            if len(items) > limit:
                out.append(f"    ... and {len(items) - limit} more")
            return out

        rows = [
            f"{'occurrences promised':<34}{self.promised:>8}",
            f"{'handler invocations':<34}{self.invocations:>8}",
            f"{'faults injected':<34}{sum(self.faults.values()):>8}  "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())),
            f"{'host stalls (not judged)':<34}{len(self.stalls):>8}"
            + (f"  longest {max(self.stalls):.2f} s" if self.stalls else ""),
            *line("lost", self.lost),
            f"{'withdrawn (backlog, job cancelled)':<34}{self.withdrawn:>8}",
            *line("double claims", self.double_claims),
            *line("duplicates (explained by a fault)", self.duplicates, must_be_zero=False),
            *line("duplicates unexplained", self.unexplained_duplicates),
            *line("stuck (not terminal)", self.stuck),
            *line("terminal statuses changed", self.changed_terminal),
            *line("epochs gone backwards", self.epochs_backwards),
            *line("tenant limits exceeded", self.over_limit),
            *line("phantom runs", self.phantoms),
            f"{'start lag, untouched by faults':<34}{self.lag_samples:>8} runs: p50 "
            f"{self.lag_p50:.3f} s, p99 {self.lag_p99:.3f} s, max {self.lag_max:.3f} s"
            + ("  ok" if self.lag_p99 <= LAG_LIMIT else f"  VIOLATION (> {LAG_LIMIT} s)"),
            *[f"    {item}" for item in self.late[:limit]],
            *([f"    ... and {len(self.late) - limit} more"] if len(self.late) > limit else []),
            self._touched(),
            "verdict: " + ("PASS" if self.ok else "FAIL"),
        ]
        return "\n".join(rows)

    def _touched(self) -> str:
        lags = self.touched_lags
        over = ", ".join(f"> {s} s: {sum(x > s for x in lags)}" for s in (3, 5, 10, 60))
        whole = self.after_whole
        return (
            f"{'start lag, touched by a fault':<34}{len(lags):>8} runs: p50 "
            f"{percentile(lags, 0.5):.3f} s, p99 {percentile(lags, 0.99):.3f} s, max "
            f"{max(lags, default=0.0):.3f} s; {over}\n"
            f"{'  the same, after whole again':<34}{len(whole):>8} runs: p99 "
            f"{percentile(whole, 0.99):.3f} s, max {max(whole, default=0.0):.3f} s; "
            f"> {WHOLE_LIMIT:.0f} s: {sum(x > WHOLE_LIMIT for x in whole)}"
            + "".join(f"\n    {item}" for item in self.slow_after_whole[:10])
            + (
                f"\n    ... and {len(self.slow_after_whole) - 10} more"
                if len(self.slow_after_whole) > 10
                else ""
            )
        )


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class _Faults:
    def __init__(self, faults: Iterable[Fault]) -> None:
        self._by_target: dict[str, list[Fault]] = defaultdict(list)
        self._global: list[Fault] = []
        self._every = list(faults)
        for f in self._every:
            if f.kind in GLOBAL_FAULTS:
                self._global.append(f)
            else:
                self._by_target[f.target].append(f)

    def on(self, target: str, start: float, end: float) -> Fault | None:
        """A fault of `target` itself overlapping [start, end]."""
        return next((f for f in self._by_target.get(target, ())
                     if f.start <= end and f.end >= start), None)  # fmt: skip

    def anywhere(self, start: float, end: float) -> Fault | None:
        return next((f for f in self._global if f.start <= end and f.end >= start), None)

    def before(self, at: float, within: float) -> list[Fault]:
        """The faults that ended in the `within` seconds before `at`, latest first."""
        return sorted((f for f in self._every if at - within <= f.end < at), key=lambda f: -f.end)

    def touching(self, start: float, end: float) -> list[Fault]:
        """The faults overlapping [start, end] that can delay a run, in the order they
        began."""
        return sorted((f for f in self._every if f.start <= end and f.end >= start
                       and f.kind != "long_txn"), key=lambda f: f.start)  # fmt: skip

    def whole_at(self, start: float, end: float) -> float | None:
        """When the last fault overlapping [start, end] that can delay a run ended (the
        system whole again, as far as the injector knows), or None if none did: a run is
        touched by a fault if this is not None. A long transaction holding back vacuum
        does not count: start lag is measured under it."""
        return max((f.end for f in self.touching(start, end)), default=None)


def check(history: History) -> Report:
    report = Report(invocations=len(history.invocations))
    faults = _Faults(history.faults)
    lease = history.lease_seconds
    for f in history.faults:
        if f.kind == HOST_STALL:
            report.stalls.append(f.end - f.start)
        else:
            report.faults[f.kind] = report.faults.get(f.kind, 0) + 1

    runs: dict[tuple[str, float], list[Invocation]] = defaultdict(list)
    for inv in sorted(history.invocations, key=lambda i: i.at):
        runs[inv.key].append(inv)

    # Lost and phantom runs.
    promises = {p.job_id: p for p in history.promises}
    for p in history.promises:
        for occurrence in p.occurrences:
            report.promised += 1
            done = runs.get((p.job_id, round(occurrence, 3)), [])
            withdrawn = (p.job_id, round(occurrence, 3)) in history.withdrawn
            if not done and withdrawn and p.tenant in history.limits:
                report.withdrawn += 1
                continue
            if not any(r.ended_at is not None and not r.failed for r in done):
                started = f"started {len(done)}x, never completed" if done else "never started"
                report.lost.append(f"job {p.job_id} ({p.kind}, {p.tenant}) occurrence "
                                   f"{occurrence:.3f}: {started}")  # fmt: skip
    for key in runs:
        promise = promises.get(key[0])
        if promise is None:
            continue  # a create the API never acknowledged may still have run
        allowed = {round(t, 3) for t in (*promise.occurrences, *promise.valid)}
        if key[1] not in allowed:
            report.phantoms.append(f"job {key[0]} ran occurrence {key[1]:.3f}, not a fire time")

    # Double claims: one execution id run twice while the first claim's lease was valid.
    by_execution: dict[str, list[Invocation]] = defaultdict(list)
    for inv in history.invocations:
        by_execution[inv.execution_id].append(inv)
    for execution_id, invs in by_execution.items():
        invs.sort(key=lambda i: i.at)
        for first, second in itertools.pairwise(invs):
            if first.ended_at is not None and first.ended_at <= second.at:
                continue  # not concurrent; a rerun of a finished execution is a duplicate
            granted = second.at < first.at + lease - 1.0  # the lease as granted at claim
            kept = (
                faults.on(first.worker, first.at, second.at) is None
                and faults.anywhere(first.at - lease, second.at) is None
            )  # an untouched owner keeps heartbeating
            if granted or kept:
                report.double_claims.append(
                    f"execution {execution_id}: {first.worker} from {first.at:.3f}, "
                    f"{second.worker} from {second.at:.3f} (lease {lease:.0f} s)"
                )

    # Duplicates: an occurrence started again although an earlier run did not fail on
    # purpose (it completed, or its owner died, paused or lost its lease).
    for key, invs in runs.items():
        for i, later in enumerate(invs):
            earlier = [r for r in invs[:i] if not r.failed]
            if not earlier:
                continue
            first = earlier[-1]
            cause = faults.on(first.worker, first.at, later.at) or faults.anywhere(
                first.at - lease, later.at
            )
            text = (f"occurrence {key[0]}@{key[1]:.3f}: attempt {first.attempt} on "
                    f"{first.worker} at {first.at:.3f}, again attempt {later.attempt} on "
                    f"{later.worker} at {later.at:.3f}")  # fmt: skip
            if cause is not None:
                report.duplicates.append(f"{text}; {cause.kind} of {cause.target}")
            else:
                report.unexplained_duplicates.append(text)

    # Stuck executions, terminal statuses that changed, epochs, tenant limits.
    report.stuck = [
        f"execution {eid}: {status}" for eid, status in history.final.items()
        if status in ("scheduled", "queued", "running")
    ]  # fmt: skip
    seen_terminal: dict[str, str] = {}
    last_epoch: dict[int, int] = {}
    for sample in sorted(history.samples, key=lambda s: s.at):
        for eid, status in sample.terminal.items():
            before = seen_terminal.setdefault(eid, status)
            if before != status:
                report.changed_terminal.append(f"execution {eid}: {before} -> {status}")
                seen_terminal[eid] = status
        for shard, epoch in sample.epochs.items():
            if epoch < last_epoch.get(shard, 0):
                report.epochs_backwards.append(
                    f"shard {shard}: {last_epoch[shard]} -> {epoch} at {sample.at:.3f}"
                )
            last_epoch[shard] = max(epoch, last_epoch.get(shard, 0))
        for tenant, running in sample.running.items():
            limit = history.limits.get(tenant)
            if limit is not None and running > limit:
                report.over_limit.append(f"tenant {tenant}: {running} running > {limit} "
                                         f"at {sample.at:.3f}")  # fmt: skip
    for eid, status in history.final.items():
        seen = seen_terminal.get(eid)
        if seen is not None and seen != status:
            report.changed_terminal.append(f"execution {eid}: {seen} -> {status} (final)")

    # Start lag of first runs no fault touched, of tenants no limit held back.
    lags = []
    for invs in runs.values():
        first = invs[0]
        if first.tenant in history.limits:
            continue  # a throttled execution waits for a slot on purpose
        whole = faults.whole_at(first.due_at - LAG_MARGIN, first.at)
        if whole is not None:
            report.touched_lags.append(first.at - first.due_at)
            after = first.at - max(first.due_at, whole)
            report.after_whole.append(after)
            if after > WHOLE_LIMIT:
                touched = faults.touching(first.due_at - LAG_MARGIN, first.at)
                report.slow_after_whole.append(_slow(first, after, touched))
            continue
        lags.append(first.at - first.due_at)
        if first.at - first.due_at > LAG_LIMIT:
            report.late.append(_late(first, faults.before(first.due_at - LAG_MARGIN, 30.0)))
    report.late.sort()
    report.lag_samples = len(lags)
    report.lag_p50, report.lag_p99 = percentile(lags, 0.5), percentile(lags, 0.99)
    report.lag_max = max(lags, default=0.0)
    return report


def _slow(first: Invocation, after: float, touched: list[Fault]) -> str:
    by = "; ".join(f"{f.kind} {f.target} {f.start - first.due_at:+.1f} s to "
                   f"{f.end - first.due_at:+.1f} s" for f in touched)  # fmt: skip
    return (
        f"due {first.due_at:.3f}, started {after:.3f} s after whole again "
        f"({first.at - first.due_at:.3f} s late) on {first.worker} (job {first.job_id}, "
        f"attempt {first.attempt}); touched by {by}"
    )


def _late(first: Invocation, before: list[Fault]) -> str:
    recent = "; ".join(f"{f.kind} {f.target} ended {first.due_at - f.end:.1f} s before"
                       for f in before[:3]) or "no fault in the 30 s before"  # fmt: skip
    return (
        f"due {first.due_at:.3f}, started {first.at - first.due_at:.3f} s late on "
        f"{first.worker} (job {first.job_id}, attempt {first.attempt}); {recent}"
    )


def first_run_lags(
    invocations: Iterable[Invocation], keep: Callable[[Invocation], bool]
) -> list[float]:
    """Start lags of the first runs of the occurrences whose first run `keep` selects."""
    firsts: dict[tuple[str, float], Invocation] = {}
    for inv in sorted(invocations, key=lambda i: i.at):
        firsts.setdefault(inv.key, inv)
    return [i.at - i.due_at for i in firsts.values() if keep(i)]

"""Python's cyclic garbage collector in a serving process (worker, scheduler).

A burst holds tens of thousands of objects alive for seconds: a worker's executions claimed
ahead (their tasks, claims and timers), a scheduler's preloaded rows and their messages. At
CPython's thresholds (700, 10, 10) full collections ran again and again over them, each
scanning everything the process holds and freeing nothing: in a worker 0.17-0.27 s each, 4
in a 20,000 burst's 2.5 s; in the scheduler 0.05-0.18 s, one of them in the 2 s before the
burst's due instant, while it published the burst's claims ahead (docs/performance.md).
Garbage is refcounted away; the collector is for cycles, which die young (an exception's
traceback) and are still collected, less often.
"""

from __future__ import annotations

import gc

GC_THRESHOLDS = (10_000, 20, 20)
"""The collector's thresholds in a serving process: a full collection is considered after
about 4 million allocations (seconds at thousands of executions a second), not never."""


def settle() -> None:
    """Freeze what start-up made (it lives as long as the process: never scanned again) and
    raise the thresholds. Called once serving is about to start."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)

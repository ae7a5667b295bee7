"""Why one occurrence of a job ran as it did, or has no execution at all: `explain` reads
the facts the store keeps (`Facts`: the occurrence's executions, the job's changes of state
and spec, its shard's owners by fencing epoch) and answers an `Explanation`: a verdict
first, the steps that led to it with their times, and the same as fields for scripts.

Pure, like `occurrences`: `horae.store.explain` reads the facts; the API
(`GET /jobs/{id}/explain`) and the CLI (`horae explain`) show the answer. `facts` holds
both ends' types, `owners` who held the shard when, `timeline` what the job was at an
instant (its schedule, its state, its fire times), `ran` an occurrence with executions and
`missing` one without.
"""

from __future__ import annotations

from horae.store.explanation.facts import (
    GAP_KINDS,
    LATE_AFTER,
    RECORDED_PER_GAP,
    Attempt,
    Epoch,
    Explanation,
    Facts,
    Found,
    JobEvent,
    OwnerChange,
    Step,
    when,
)
from horae.store.explanation.missing import explain_missing
from horae.store.explanation.ran import explain_rows
from horae.store.explanation.timeline import (
    default_occurrence,
    fire_times_around,
    schedule_at,
    state_at,
)

__all__ = [
    "GAP_KINDS",
    "LATE_AFTER",
    "RECORDED_PER_GAP",
    "Attempt",
    "Epoch",
    "Explanation",
    "Facts",
    "Found",
    "JobEvent",
    "OwnerChange",
    "Step",
    "default_occurrence",
    "explain",
    "fire_times_around",
    "schedule_at",
    "state_at",
    "when",
]


def explain(f: Facts) -> Explanation:
    """Why the occurrence at `f.at` went as it did (`Facts`: what the store holds)."""
    return explain_rows(f) if f.rows else explain_missing(f)

"""`horae explain`'s table: the verdict first, then what was explained, then the steps
aligned in columns (or, only when no reason was found, what was checked)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from horae.api.schemas import ExplanationOut
from horae.cli.explain import lines
from horae.store.explanation import Explanation, Step

AT = datetime(2026, 12, 2, 10, 0, 5, tzinfo=UTC)
JOB = uuid.UUID(int=17)


def test_the_table_is_the_verdict_then_the_steps_in_columns() -> None:
    found = Explanation(
        job_id=JOB,
        at=AT,
        occurrence_at=AT,
        outcome="skipped",
        reason="forbid",
        verdict="skipped: concurrencyPolicy=Forbid",
        shard=17,
        steps=[Step(AT, "due", "on shard 17"), Step(AT, "skipped", "by scheduler-0 (epoch 1)")],
        checked=["not shown"],
    )
    assert lines(ExplanationOut.from_explanation(found), name="shop/nightly") == [
        "skipped: concurrencyPolicy=Forbid",
        f"job {JOB} (shop/nightly), occurrence 2026-12-02 10:00:05.000Z, shard 17",
        "  2026-12-02 10:00:05.000Z  due      on shard 17",
        "  2026-12-02 10:00:05.000Z  skipped  by scheduler-0 (epoch 1)",
    ]


def test_what_was_checked_is_shown_only_when_no_reason_was_found() -> None:
    def table(reason: str) -> list[str]:
        found = Explanation(
            job_id=JOB,
            at=AT,
            occurrence_at=None,
            outcome="no_row",
            reason=reason,
            verdict="no row",
            shard=17,
            checked=["the schedule in force then: * * * * *"],
        )
        return lines(ExplanationOut.from_explanation(found))

    assert table("unknown")[1:] == [
        f"job {JOB}, at 2026-12-02 10:00:05.000Z, shard 17",
        "  checked: the schedule in force then: * * * * *",
    ]
    assert table("paused")[1:] == [f"job {JOB}, at 2026-12-02 10:00:05.000Z, shard 17"]

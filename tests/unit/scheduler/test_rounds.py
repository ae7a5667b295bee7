"""How a dispatch round judges first attempts by their job's overlap policy (the pure rule,
`rounds.judge`; what the store answers about the job is given)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from horae.models import ConcurrencyPolicy
from horae.scheduler.rounds import BUFFER_ONE, FORBID, Plan, judge
from horae.store.dispatch import Due
from horae.store.rows import LiveExecution

T0 = datetime(2030, 1, 1, tzinfo=UTC)
JOB = uuid.uuid4()


def due(second: int, policy: ConcurrencyPolicy, *, attempt: int = 1) -> Due:
    at = T0 + timedelta(seconds=second)
    return Due(uuid.uuid4(), JOB, "t", "task", 3, at, at, attempt, None, policy.value)


def row(d: Due, status: str = "scheduled", owner: str | None = None) -> LiveExecution:
    """The store's answer about `d`: scheduled (still waiting or due), queued or running."""
    return LiveExecution(d.id, d.job_id, d.due_at, d.occurrence_at, status, owner)


def judged(dues: list[Due], others: list[LiveExecution]) -> Plan:
    plan = Plan()
    judge(plan, dues, others)
    return plan


def test_allow_publishes_every_occurrence_whatever_runs() -> None:
    running, new = due(0, ConcurrencyPolicy.ALLOW), due(1, ConcurrencyPolicy.ALLOW)
    plan = judged([new], [row(running, "running", "w1")])
    assert plan.publish == [new] and not (plan.skip or plan.cancel or plan.held)


def test_forbid_skips_while_one_runs_and_runs_one_of_several_due_together() -> None:
    running, new = due(0, ConcurrencyPolicy.FORBID), due(1, ConcurrencyPolicy.FORBID)
    plan = judged([new], [row(running, "running", "w1")])
    assert plan.publish == [] and [(s.due, s.kind, s.message) for s in plan.skip] == [
        (new, "forbid", FORBID)
    ]
    # After an outage two are due at once and nothing runs: the earlier one runs alone.
    first, second = due(1, ConcurrencyPolicy.FORBID), due(2, ConcurrencyPolicy.FORBID)
    plan = judged([second, first], [])
    assert plan.publish == [first] and [s.due for s in plan.skip] == [second]


def test_a_retry_is_never_judged() -> None:
    running = due(0, ConcurrencyPolicy.FORBID)
    retry = due(1, ConcurrencyPolicy.FORBID, attempt=2)
    assert judged([retry], [row(running, "running", "w1")]).publish == [retry]


def test_replace_publishes_and_cancels_every_earlier_live_one() -> None:
    running, queued = due(0, ConcurrencyPolicy.REPLACE), due(1, ConcurrencyPolicy.REPLACE)
    new = due(2, ConcurrencyPolicy.REPLACE)
    plan = judged([new], [row(running, "running", "w1"), row(queued, "queued")])
    assert plan.publish == [new]
    assert sorted(plan.cancel) == sorted([(running.id, running.due_at), (queued.id, queued.due_at)])


def test_replace_due_together_publishes_only_the_latest() -> None:
    first, second = due(1, ConcurrencyPolicy.REPLACE), due(2, ConcurrencyPolicy.REPLACE)
    plan = judged([first, second], [])
    assert plan.publish == [second] and plan.cancel == [(first.id, first.due_at)]


def test_buffer_one_runs_when_nothing_else_of_its_job_is_live_or_waiting() -> None:
    new = due(0, ConcurrencyPolicy.BUFFER_ONE)
    plan = judged([new], [row(new)])
    assert plan.publish == [new] and not plan.held


def test_buffer_one_waits_behind_a_running_one_and_a_later_one_is_skipped() -> None:
    running = due(0, ConcurrencyPolicy.BUFFER_ONE)
    waits, later = due(1, ConcurrencyPolicy.BUFFER_ONE), due(2, ConcurrencyPolicy.BUFFER_ONE)
    plan = judged([waits], [row(running, "running", "w1"), row(waits)])
    assert plan.held == [waits] and plan.publish == [] and plan.skip == []
    # Looked at again with the next one due: it still waits, and the next one is skipped.
    plan = judged([waits, later], [row(running, "running", "w1"), row(waits), row(later)])
    assert plan.held == [waits]
    assert [(s.due, s.kind, s.message) for s in plan.skip] == [(later, "buffer_one", BUFFER_ONE)]
    # The next one due alone while the earlier one waits in the heap: skipped too.
    plan = judged([later], [row(running, "running", "w1"), row(waits), row(later)])
    assert [s.due for s in plan.skip] == [later] and plan.held == []


def test_buffer_one_runs_the_waiting_one_once_the_running_one_ended() -> None:
    waits, later = due(1, ConcurrencyPolicy.BUFFER_ONE), due(2, ConcurrencyPolicy.BUFFER_ONE)
    plan = judged([waits], [row(waits)])
    assert plan.publish == [waits]
    # Both looked at in one round: the earlier runs and the later one waits behind it.
    plan = judged([later, waits], [row(waits), row(later)])
    assert plan.publish == [waits] and plan.held == [later] and plan.skip == []


def test_buffer_one_due_while_the_waiting_one_is_about_to_start_waits_instead() -> None:
    # Nothing runs any more, but the waiting one has not been looked at again yet: the new
    # one waits (behind it), rather than being skipped for a run that no longer exists.
    waits, new = due(1, ConcurrencyPolicy.BUFFER_ONE), due(2, ConcurrencyPolicy.BUFFER_ONE)
    plan = judged([new], [row(waits), row(new)])
    assert plan.held == [new] and plan.skip == []


def test_buffer_one_no_longer_scheduled_is_let_go() -> None:
    # Paused, edited or dispatched by another owner meanwhile: neither published nor held.
    running, waits = due(0, ConcurrencyPolicy.BUFFER_ONE), due(1, ConcurrencyPolicy.BUFFER_ONE)
    plan = judged([waits], [row(running, "running", "w1")])
    assert plan == Plan()

"""The condition-merge rule every writer of a status's conditions applies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from horae.operator.conditions import Condition, merged

T0 = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)


def test_a_new_condition_is_dated_now_and_says_which_generation_it_saw() -> None:
    assert merged(
        None, [Condition("Ready", True, "Stored", "job stored")], now=T0, generation=3
    ) == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Stored",
            "message": "job stored",
            "lastTransitionTime": "2030-01-01T09:00:00Z",
            "observedGeneration": 3,
        }
    ]


def test_the_transition_time_stays_while_the_status_does_even_as_reason_and_message_change() -> (
    None
):
    first = merged(
        None,
        [Condition("Failing", True, "Failed", "the last attempt ended failed")],
        now=T0,
        generation=1,
    )
    again = merged(
        first,
        [Condition("Failing", True, "Dead", "the last attempt ended dead")],
        now=T1,
        generation=2,
    )
    assert again[0]["lastTransitionTime"] == "2030-01-01T09:00:00Z"
    assert (again[0]["reason"], again[0]["observedGeneration"]) == ("Dead", 2)


def test_a_change_of_status_moves_the_transition_time() -> None:
    first = merged(None, [Condition("Ready", True, "Stored")], now=T0, generation=1)
    refused = merged(
        first, [Condition("Ready", False, "InvalidSpec", "spec.task: bad")], now=T1, generation=2
    )
    assert refused[0]["status"] == "False"
    assert refused[0]["lastTransitionTime"] == "2030-01-01T09:05:00Z"


def test_conditions_of_other_types_are_kept_in_their_place() -> None:
    existing = merged(
        None,
        [Condition("Ready", True, "Stored"), Condition("Suspended", False, "Active")],
        now=T0,
        generation=1,
    )
    refused = merged(existing, [Condition("Ready", False, "QuotaExceeded")], now=T1, generation=2)
    assert [c["type"] for c in refused] == ["Ready", "Suspended"]
    assert refused[1] == existing[1]
    scaling = merged(
        refused, [Condition("Scaling", False, "DesiredReplicas")], now=T1, generation=None
    )
    assert [c["type"] for c in scaling] == ["Ready", "Suspended", "Scaling"]
    assert "observedGeneration" not in scaling[2]


def test_a_condition_written_without_a_transition_time_gets_one() -> None:
    """Statuses written before conditions were dated by transition have every field."""
    legacy = [{"type": "Ready", "status": "True", "reason": "Stored", "message": ""}]
    [ready] = merged(legacy, [Condition("Ready", True, "Stored")], now=T1, generation=1)
    assert ready["lastTransitionTime"] == "2030-01-01T09:05:00Z"

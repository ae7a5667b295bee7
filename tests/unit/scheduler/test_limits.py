"""The dispatch-time split of a round by tenants' free slots."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from horae.scheduler.limits import split
from horae.store.dispatch import Due

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def due(tenant: str, deadline: int | None = None, late: float = 0) -> Due:
    at = NOW - timedelta(seconds=late)
    return Due(uuid.uuid4(), uuid.uuid4(), tenant, "t", 0, at, at, 1, deadline)


def test_a_limited_tenant_sends_only_as_many_as_it_has_free_slots_in_order() -> None:
    a = [due("a") for _ in range(5)]
    go, wait = split(a, {"a": 2}, NOW)
    assert go == a[:2] and wait == a[2:]


def test_unlimited_tenants_always_go_and_a_full_tenant_holds_all_back() -> None:
    a, b = [due("a") for _ in range(3)], [due("b") for _ in range(3)]
    go, wait = split([*a, *b], {"a": 0}, NOW)
    assert go == b and wait == a


def test_one_past_its_starting_deadline_goes_to_be_skipped_without_a_slot() -> None:
    late, fresh = due("a", deadline=5, late=10), due("a", deadline=5)
    go, wait = split([late, fresh], {"a": 0}, NOW)
    assert go == [late] and wait == [fresh]

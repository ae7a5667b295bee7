"""Dispatch routing keys and pool queue names: one tenant's work never takes another's path."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from horae.broker import ROUTING_KEY_BYTES, Names, routing_key

labels = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)
tenants = labels | st.text(min_size=1, max_size=253).filter(lambda t: "\x00" not in t)
tasks = st.text(min_size=1, max_size=253).filter(lambda t: "\x00" not in t)


def test_a_namespace_and_a_task_make_a_readable_key() -> None:
    assert routing_key("team-a", "billing.invoice") == "team-a.billing.invoice"


@given(tenants, tasks, tenants, tasks)
def test_two_tenants_or_tasks_never_share_a_routing_key(
    tenant: str, task: str, other_tenant: str, other_task: str
) -> None:
    if (tenant, task) != (other_tenant, other_task):
        assert routing_key(tenant, task) != routing_key(other_tenant, other_task)


@given(tenants, tasks)
def test_every_routing_key_fits_amqp(tenant: str, task: str) -> None:
    assert len(routing_key(tenant, task).encode()) <= ROUTING_KEY_BYTES


def test_a_dotted_tenant_cannot_pass_for_another_tenant_and_task() -> None:
    # "a" + "b.c" and "a.b" + "c" would both read "a.b.c"
    assert routing_key("a", "b.c") == "a.b.c"
    assert routing_key("a.b", "c") != "a.b.c"


def test_pools_of_one_name_in_two_namespaces_have_two_queues() -> None:
    names = Names("horae")
    assert names.pool_queue("team-a", "default") == "horae.pool.team-a.default"
    assert names.pool_queue("team-a", "default") != names.pool_queue("team-b", "default")

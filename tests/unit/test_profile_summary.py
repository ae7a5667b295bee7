"""bench/profile.py's reading of py-spy's collapsed stacks."""

from __future__ import annotations

from bench.profile import frame_name, ours, summarise

RAW = """\
process 42:"horae worker";thread (0x7F);run (asyncio/runners.py:118);claim_many (/work/main/horae/store/executions.py:260);fetch (/x/.venv/lib/python3.11/site-packages/asyncpg/connection.py:690) 30
process 42:"horae worker";thread (0x7F);run (asyncio/runners.py:118);claim_many (/work/main/horae/store/executions.py:271) 10
process 42:"horae worker";thread (0x7F);run (asyncio/runners.py:118);walk (a.py:1);walk (a.py:2) 5
not a stack line
"""  # noqa: E501


def test_lines_of_one_function_are_one_entry_and_paths_lose_their_prefix() -> None:
    assert frame_name("fetch (/x/.venv/lib/python3.11/site-packages/asyncpg/connection.py:690)") \
        == "fetch (asyncpg/connection.py)"  # fmt: skip
    assert frame_name("<module> (bench/noop_tasks.py:3)") == "<module> (bench/noop_tasks.py)"


def test_own_time_is_the_leaf_and_inclusive_time_counts_a_recursive_function_once() -> None:
    total, own, inclusive = summarise(RAW.replace("/work/main/", ""))
    assert total == 45
    assert own == {
        "fetch (asyncpg/connection.py)": 30,
        "claim_many (horae/store/executions.py)": 10,
        "walk (a.py)": 5,
    }
    assert inclusive["claim_many (horae/store/executions.py)"] == 40
    assert inclusive["run (asyncio/runners.py)"] == 45
    assert inclusive["walk (a.py)"] == 5


def test_our_functions_leave_out_the_entry_points_every_sample_passes_through() -> None:
    _, _, inclusive = summarise(
        "main (horae/cli/main.py:1);run (horae/cli/support.py:2);tick (horae/scheduler/leases.py:3)"
        ";call_api (kubernetes/client/api_client.py:4) 7\n"
    )
    assert ours(inclusive) == {"tick (horae/scheduler/leases.py)": 7}

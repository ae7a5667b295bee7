"""The suite's own hygiene on the shared broker: a session killed before its teardown
leaves its vhost (and its quorum queues, about 3 broker file handles each) behind; the
next session deletes it, and never a live session's vhost or anyone else's."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from tests.support.vhosts import delete_abandoned, rabbitmqctl, session_vhost


def test_a_dead_sessions_vhost_is_deleted_and_a_live_ones_and_others_are_kept() -> None:
    if rabbitmqctl("list_vhosts") is None:
        pytest.skip("needs rabbitmqctl")
    finished = subprocess.Popen(["true"])
    finished.wait()
    dead = f"horae-test-{finished.pid}-{uuid.uuid4().hex[:8]}"
    unnamed = f"horae-test-{uuid.uuid4().hex[:8]}"  # named before sessions carried a pid
    live = session_vhost()
    foreign = f"team-{uuid.uuid4().hex[:8]}"
    made = [dead, unnamed, live, foreign]
    try:
        for vhost in made:
            assert rabbitmqctl("add_vhost", vhost) is not None
        deleted = delete_abandoned()
        listed = (rabbitmqctl("list_vhosts") or "").split()
        assert {dead, unnamed} <= set(deleted)
        assert {dead, unnamed}.isdisjoint(listed)
        assert {live, foreign} <= set(listed)
    finally:
        for vhost in made:
            rabbitmqctl("delete_vhost", vhost)

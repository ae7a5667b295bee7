"""The test sessions' RabbitMQ vhosts: one per session, named with its pytest pid, so a
session killed before its teardown can be cleaned up by the next one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

SESSION_VHOST = re.compile(r"horae-test-(?:(?P<pid>\d+)-)?[0-9a-f]{8}")


def session_vhost() -> str:
    return f"horae-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def rabbitmqctl(*args: str) -> str | None:
    """The output of a successful `rabbitmqctl -q ARGS`; None without rabbitmqctl or on
    failure."""
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        return None
    done = subprocess.run([ctl, "-q", *args], capture_output=True, text=True, timeout=120)
    return done.stdout if done.returncode == 0 else None


def abandoned(vhost: str) -> bool:
    """A session vhost whose pytest process is gone. Its queues stay on the broker, and
    each quorum queue holds about 3 of the broker's file handles (RabbitMQ 3.10): two such
    leftovers use up a broker started with 1,024 descriptors, and connections then hang
    in the handshake."""
    named = SESSION_VHOST.fullmatch(vhost)
    if named is None:
        return False
    pid = named["pid"]
    return pid is None or not Path(f"/proc/{pid}").exists()


def delete_abandoned() -> list[str]:
    """Delete the vhosts of sessions that died; returns their names."""
    listed = rabbitmqctl("list_vhosts")
    gone = [v for v in (listed or "").split() if abandoned(v)]
    for vhost in gone:
        rabbitmqctl("delete_vhost", vhost)
    return gone

"""Start `horae` components as real subprocesses; stop or kill them; keep their logs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HORAE = str(Path(sys.executable).parent / "horae")
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"  # hack/services.sh
HAS_FAKETIME = os.path.exists(FAKETIME_LIB)


def clock_offset_env(seconds: str) -> dict[str, str]:
    """The environment of a component whose wall clock is off by `seconds` ("-2", "+10"):
    libfaketime preloaded into the process itself (the `faketime` command would stand
    between it and the signals tests send); its monotonic clock is left alone."""
    return {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": f"{seconds}s",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1"}  # fmt: skip


@dataclass
class Component:
    name: str
    args: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes]
    identity: str = ""
    _log: object = field(repr=False, default=None)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, as a crash would leave it."""
        self.signal(signal.SIGKILL)
        self.popen.wait(timeout=10)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        if self.alive():
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.popen.returncode

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class Processes:
    """A factory of components sharing one environment; all are stopped at teardown."""

    def __init__(
        self,
        env: Mapping[str, str],
        log_dir: Path,
        command_env: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.env = dict(env)
        self.log_dir = log_dir
        self.command_env = dict(command_env or {})
        """Extra environment per `horae` command, e.g. the operator's own kubeconfig."""
        self.started: list[Component] = []

    def start(
        self, name: str, *args: str, env: Mapping[str, str] | None = None,
        wrapper: Sequence[str] = (), identity: str | None = None,
    ) -> Component:  # fmt: skip
        """`wrapper`: a command the component runs under, e.g. `ip netns exec NAME`;
        `identity`: an earlier component's, for a process restarted in its place."""
        identity = identity or f"{name}-{len(self.started)}"
        log_path = self.log_dir / f"{identity}-{len(self.started)}.log"
        log = log_path.open("wb")
        popen = subprocess.Popen(
            [*wrapper, HORAE, *args],
            env={
                **self.env,
                **self.command_env.get(args[0] if args else "", {}),
                **(env or {}),
                "HORAE_IDENTITY": identity,
            },
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,
        )
        component = Component(name, list(args), log_path, popen, identity, log)
        self.started.append(component)
        return component

    def stop_all(self) -> None:
        for component in self.started:
            component.signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for component in self.started:
            try:
                component.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                component.kill()

    def kill_all(self) -> None:
        """SIGKILL every component: at a test's end, where how they stop is not looked at
        (a graceful stop takes up to a second or two: an operator's, a worker's)."""
        for component in self.started:
            component.signal(signal.SIGKILL)
        for component in self.started:
            component.popen.wait(timeout=10)

    def dump(self) -> str:
        parts = []
        for c in self.started:
            tail = "\n".join(c.log().splitlines()[-40:])
            parts.append(f"----- {c.name} ({' '.join(c.args)}) rc={c.popen.returncode}\n{tail}")
        return "\n".join(parts)

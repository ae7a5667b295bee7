"""A scheduler cut off from the API server and the database: a network namespace.

A namespace joined to the host by a veth pair; forwarders (forward.py) make the
namespace's 127.0.0.1 ports of PostgreSQL, RabbitMQ and the kube-apiserver lead to the
host's, so a scheduler started in it runs with the same settings as the others. Taking
the host end of the link down cuts it off (its connections hang, nothing is reset);
bringing it up heals. Needs root and `ip`; `Partition.create` says why not otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

FORWARD = str(Path(__file__).with_name("forward.py"))


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=True)


@dataclass
class Partition:
    namespace: str
    host_link: str
    gateway: str
    forwarders: list[subprocess.Popen[str]] = field(default_factory=list)

    @property
    def wrapper(self) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.namespace)

    @classmethod
    def create(cls, ports: Sequence[int]) -> Partition | str:
        """The namespace with forwarders of `ports`, or why it cannot be made here."""
        if os.geteuid() != 0:
            return "network namespaces need root here"
        if shutil.which("ip") is None:
            return "no `ip` command (iproute2)"
        tag = f"{os.getpid() % 100000}"
        net = f"10.213.{os.getpid() % 250}"
        part = cls(f"hchaos{tag}", f"hc{tag}h", f"{net}.1")
        peer = f"hc{tag}n"
        try:
            _ip("netns", "add", part.namespace)
            _ip("link", "add", part.host_link, "type", "veth", "peer", "name", peer)
            _ip("link", "set", peer, "netns", part.namespace)
            _ip("addr", "add", f"{part.gateway}/30", "dev", part.host_link)
            _ip("link", "set", part.host_link, "up")
            inside = ("netns", "exec", part.namespace, "ip")
            _ip(*inside, "addr", "add", f"{net}.2/30", "dev", peer)
            _ip(*inside, "link", "set", peer, "up")
            _ip(*inside, "link", "set", "lo", "up")
            part._forward([], [f"{part.gateway}:{p}=127.0.0.1:{p}" for p in ports])
            part._forward(list(part.wrapper),
                          [f"127.0.0.1:{p}={part.gateway}:{p}" for p in ports])  # fmt: skip
        except (subprocess.CalledProcessError, OSError, RuntimeError) as exc:
            part.destroy()
            detail = exc.stderr.strip() if isinstance(exc, subprocess.CalledProcessError) else exc
            return f"cannot make a network namespace here: {detail}"
        return part

    def _forward(self, wrapper: list[str], pairs: list[str]) -> None:
        proc = subprocess.Popen([*wrapper, sys.executable, FORWARD, *pairs],
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
        self.forwarders.append(proc)
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("a forwarder did not start")

    def cut(self) -> None:
        _ip("link", "set", self.host_link, "down")

    def heal(self) -> None:
        _ip("link", "set", self.host_link, "up")

    def destroy(self) -> None:
        for proc in self.forwarders:
            proc.kill()
            proc.wait(timeout=10)
        subprocess.run(["ip", "netns", "del", self.namespace], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", self.host_link], capture_output=True, check=False)

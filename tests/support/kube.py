"""Local control planes for tests (hack/k8s-up.sh): the session's bare one, and whole
clusters of their own for the tests that need controllers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ControlPlane:
    dir: Path
    bin: Path

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def env(self) -> dict[str, str]:
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": f"{self.bin}:{os.environ['PATH']}",
        }

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, token: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args]
        if token is not None:
            cmd[3:3] = ["--token", token]
        result = subprocess.run(
            cmd, input=input, capture_output=True, text=True, timeout=60, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)


def service_account_kubeconfig(
    plane: ControlPlane, namespace: str, account: str, path: Path
) -> Path:
    """A kubeconfig that talks to `plane` as ServiceAccount `namespace/account`."""
    token = plane.kubectl("create", "token", account, "-n", namespace, "--duration=24h").stdout
    admin = plane.kubectl("config", "view", "--raw", "-o", "json").stdout
    cluster = json.loads(admin)["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": account,
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": account, "user": {"token": token.strip()}}],
        "contexts": [{"name": account, "context": {"cluster": "local", "user": account}}],
    }  # fmt: skip
    path.write_text(json.dumps(config))
    return path


def k8s_bin() -> Path:
    """The directory of the pinned binaries (kube-apiserver, helm, promtool, ...):
    hack/build-k8s.sh builds what is missing, then prints it."""
    bin_dir = subprocess.run(
        [str(REPO / "hack" / "build-k8s.sh")],
        capture_output=True,
        text=True,
        timeout=3600,
        check=True,
    ).stdout.strip()
    return Path(bin_dir)


def start_control_plane(base: Path, *, controllers: bool = False) -> ControlPlane:
    """A control plane of hack/k8s-up.sh in `base`, on free ports: etcd and kube-apiserver
    only (the suite's shared plane: no controller spends the two cores' time), or with
    `controllers` the whole local cluster (controller manager, scheduler, kwok nodes)."""
    bin_dir = k8s_bin()
    env = {
        **os.environ,
        "HORAE_ETCD_PORT": str(free_port()),
        "HORAE_ETCD_PEER_PORT": str(free_port()),
        "HORAE_APISERVER_PORT": str(free_port()),
        "HORAE_K8S_CONTROLLERS": "1" if controllers else "0",
    }
    result = subprocess.run(
        [str(REPO / "hack" / "k8s-up.sh"), str(base)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"control plane did not start: {result.stderr.strip()}")
    return ControlPlane(base, bin_dir)


def apply_crds(plane: ControlPlane) -> None:
    """Horae's CRDs, established."""
    plane.kubectl("apply", "-f", str(REPO / "crds"))
    for crd in ("scheduledjobs", "executions", "workerpools", "backfills"):
        wait_established(plane, f"{crd}.horae.dev")


def wait_established(plane: ControlPlane, crd: str, timeout: float = 60) -> None:
    """Until the CRD `crd` (plural.group) is Established. Not `kubectl wait
    --for=condition=Established`: that fails at once, rather than waits, on a CRD the API
    server has not given conditions yet."""
    established = '{.status.conditions[?(@.type=="Established")].status}'
    deadline = time.monotonic() + timeout
    while plane.kubectl("get", f"crd/{crd}", "-o", f"jsonpath={established}",
                        check=False).stdout != "True":  # fmt: skip
        if time.monotonic() > deadline:
            raise AssertionError(f"CRD {crd} not Established within {timeout:.0f} s")
        time.sleep(0.2)


KINDS_WITH_FINALIZERS = "scheduledjobs,backfills,workerpools"
"""The kinds whose resources the operator puts its finalizer on."""


def leave_no_horae_resources(plane: ControlPlane, namespace: str) -> None:
    """At a test's end: operators of later tests watch the whole cluster, so leave them no
    ScheduledJob, Backfill or WorkerPool of `namespace` to act on (their finalizers
    dropped: no operator is left), even when the test failed half-way."""
    left = plane.kubectl("get", KINDS_WITH_FINALIZERS, "-n", namespace, "-o", "name").stdout.split()
    for resource in left:
        plane.kubectl("patch", resource, "-n", namespace, "--type=merge",
                      "-p", '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
    if left:
        plane.kubectl("delete", KINDS_WITH_FINALIZERS, "--all", "-n", namespace, "--wait=false",
                      check=False)  # fmt: skip


def stop_control_plane(plane: ControlPlane) -> None:
    subprocess.run([str(REPO / "hack" / "k8s-down.sh"), str(plane.dir)], timeout=30, check=False)


def jobs_editor_token(plane: ControlPlane, namespace: str, name: str = "caller") -> str:
    """A ServiceAccount bound to horae-jobs-editor in `namespace`, and a token for it."""
    plane.kubectl("create", "serviceaccount", name, "-n", namespace)
    plane.kubectl("create", "rolebinding", name, "-n", namespace,
                  "--clusterrole=horae-jobs-editor",
                  f"--serviceaccount={namespace}:{name}")  # fmt: skip
    return plane.kubectl("create", "token", name, "-n", namespace).stdout.strip()

"""Broken set-up fails fast, with a one-line reason and a non-zero exit."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

from tests.support.kube import free_port

HACK = Path(__file__).resolve().parents[2] / "hack"


def run(script: str, *args: str, env: dict[str, str], timeout: float = 60) -> tuple[int, str]:
    result = subprocess.run(
        [str(HACK / script), *args], env={**os.environ, **env}, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    return result.returncode, result.stderr.strip()


def path_without_go(tmp_path: Path) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "env", "mkdir", "mktemp", "rm", "sed", "grep", "awk", "cat", "dirname"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_build_without_go_says_so(tmp_path: Path) -> None:
    rc, err = run("build-k8s.sh", env={"PATH": path_without_go(tmp_path),
                                       "HORAE_CACHE": str(tmp_path / "cache")})  # fmt: skip
    assert rc != 0
    assert err.splitlines()[-1] == (
        "build-k8s: no Go toolchain on PATH: install Go >= 1.24 to build the Kubernetes binaries"
    )


def test_binaries_directory_missing_binaries_is_refused(tmp_path: Path) -> None:
    rc, err = run("build-k8s.sh", env={"KUBEBUILDER_ASSETS": str(tmp_path)})
    assert rc != 0
    binaries = "kube-apiserver kubectl etcd helm"
    assert err == f"build-k8s: KUBEBUILDER_ASSETS={tmp_path} lacks one of: {binaries}"


def test_a_failing_build_names_the_version(tmp_path: Path) -> None:
    rc, err = run("build-k8s.sh", env={"HORAE_CACHE": str(tmp_path / "cache"),
                                       "HORAE_K8S_VERSION": "v1.0.999"}, timeout=120)  # fmt: skip
    assert rc != 0
    assert "could not fetch k8s.io/kubernetes@v1.0.999" in err.splitlines()[-1]


def test_control_plane_refuses_a_taken_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc, err = run("k8s-up.sh", str(tmp_path / "k8s"), env={
            "HORAE_APISERVER_PORT": str(port), "HORAE_ETCD_PORT": str(free_port()),
            "HORAE_ETCD_PEER_PORT": str(free_port()),
        })  # fmt: skip
    assert rc != 0
    assert err.splitlines()[-1].startswith(f"k8s-up: port {port} on 127.0.0.1 is already taken")


def test_services_refuse_a_postgres_port_with_no_cluster() -> None:
    port = free_port()
    rc, err = run("services.sh", env={"HORAE_PG_PORT": str(port)})
    assert rc != 0
    assert err.splitlines()[-1] == f"services: no PostgreSQL cluster is configured on port {port}"

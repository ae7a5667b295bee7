"""The set-up scripts: broken set-up fails fast, with a one-line reason and a non-zero exit;
what they find on the machine (another PostgreSQL, a partial binaries directory) is used
or left alone, never changed."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.kube import free_port

HACK = Path(__file__).resolve().parents[2] / "hack"


def run(script: str, *args: str, env: dict[str, str], timeout: float = 60) -> tuple[int, str]:
    result = subprocess.run(
        [str(HACK / script), *args], env={**os.environ, **env}, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    return result.returncode, result.stderr.strip()


# What the scripts run besides Go (build-k8s.sh links a partial directory's binaries).
TOOLS_BUT_GO = ("bash", "env", "mkdir", "mktemp", "rm", "sed", "grep", "awk", "cat")
TOOLS_BUT_GO += ("dirname", "sha256sum", "cut", "ln")


def path_without_go(tmp_path: Path) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS_BUT_GO:
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


def test_control_plane_names_the_modes_it_knows(tmp_path: Path) -> None:
    rc, err = run("k8s-up.sh", str(tmp_path / "k8s"), env={"HORAE_K8S_CONTROLLERS": "yes"})
    assert rc != 0
    assert err.splitlines()[-1] == (
        "k8s-up: HORAE_K8S_CONTROLLERS must be 1 (controllers, scheduler and kwok nodes)"
        " or 0 (etcd and kube-apiserver only), not 'yes'"
    )


# ---- build-k8s.sh with a directory holding only some binaries (setup-envtest's) ---------

ENVTEST = ("kube-apiserver", "etcd", "kubectl")
"""What setup-envtest's directory holds."""
LACKING = ("kube-controller-manager", "kube-scheduler", "helm", "kwok", "promtool")
"""What it lacks, in the order build-k8s.sh names them."""
BINARIES = (*ENVTEST, *LACKING)


def cached_bin() -> Path:
    """The cache's binaries directory (built by `make k8s` before the suite runs)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HORAE_K8S_BIN", "KUBEBUILDER_ASSETS")}
    out = subprocess.run(
        [str(HACK / "build-k8s.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=True,
    ).stdout
    return Path(out.strip())


def envtest_like(tmp_path: Path, source: Path) -> Path:
    """A setup-envtest directory: kube-apiserver, etcd and kubectl, none of the rest."""
    assets = tmp_path / "assets"
    assets.mkdir()
    for binary in ENVTEST:
        (assets / binary).symlink_to(source / binary)
    return assets


@pytest.mark.parametrize("var", ["KUBEBUILDER_ASSETS", "HORAE_K8S_BIN"])
def test_envtest_assets_are_used_and_what_they_lack_comes_from_the_cache(
    tmp_path: Path, var: str
) -> None:
    real = cached_bin()
    assets = envtest_like(tmp_path, real)
    # A cache that has only what the assets lack, and no Go on PATH: any build would fail.
    cache = tmp_path / "cache"
    cache_bin = cache / "k8s" / real.parent.name / "bin"
    cache_bin.mkdir(parents=True)
    for binary in LACKING:
        (cache_bin / binary).symlink_to(real / binary)
    for stamp in real.glob(".*.version"):  # kwok's and promtool's versions (build-k8s.sh)
        (cache_bin / stamp.name).write_text(stamp.read_text())
    result = subprocess.run(
        [str(HACK / "build-k8s.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={
            **os.environ,
            var: str(assets),
            "HORAE_CACHE": str(cache),
            "PATH": path_without_go(tmp_path),
        },
    )
    assert result.returncode == 0, result.stderr
    printed = Path(result.stdout.strip())
    assert sorted(p.name for p in printed.iterdir()) == sorted(BINARIES)
    for binary in ENVTEST:
        assert os.readlink(printed / binary) == str(assets / binary)
    for binary in LACKING:
        assert os.readlink(printed / binary) == str(cache_bin / binary)
    version = subprocess.run(
        [str(printed / "kube-apiserver"), "--version"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert version.startswith("Kubernetes v1.")


def test_envtest_assets_build_only_what_they_lack(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    assets.mkdir()
    for binary in ENVTEST:
        (assets / binary).write_text("#!/bin/sh\n")
        (assets / binary).chmod(0o755)
    cache = tmp_path / "cache"
    rc, err = run(
        "build-k8s.sh",
        env={
            "KUBEBUILDER_ASSETS": str(assets),
            "HORAE_CACHE": str(cache),
            "PATH": path_without_go(tmp_path),
        },
    )
    assert rc != 0
    first, last = err.splitlines()[0], err.splitlines()[-1]
    assert first.startswith(
        f"build-k8s: KUBEBUILDER_ASSETS={assets} has no {' '.join(LACKING)}: building only"
    )
    assert last == (
        "build-k8s: no Go toolchain on PATH: install Go >= 1.24 to build the Kubernetes binaries"
    )


# ---- services.sh beside a PostgreSQL it did not start ------------------------------------

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("pg_createcluster") is None,
    reason="creates Debian PostgreSQL clusters: needs root and postgresql-common",
)
PG_VERSION = os.environ.get("HORAE_TEST_PG_VERSION", "15")


@dataclass
class Cluster:
    name: str
    port: int

    def sql(self, query: str) -> str:
        out = subprocess.run(
            ["runuser", "-u", "postgres", "--", "psql", "-p", str(self.port), "-qtAc", query],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return out.stdout.strip()

    @property
    def started_at(self) -> str:
        return self.sql("select pg_postmaster_start_time()")

    @property
    def auto_conf(self) -> bytes:
        return Path(
            f"/var/lib/postgresql/{PG_VERSION}/{self.name}/postgresql.auto.conf"
        ).read_bytes()

    def settings(self) -> tuple[str, str, str]:
        return (
            self.sql("show shared_buffers"),
            self.sql("show max_connections"),
            self.sql("show shared_preload_libraries"),
        )


def drop_cluster(name: str) -> None:
    subprocess.run(
        ["pg_dropcluster", "--stop", PG_VERSION, name],
        capture_output=True,
        timeout=120,
        check=False,
    )


def cluster_name() -> str:
    return f"horae_test_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def users_cluster() -> Iterator[Cluster]:
    """A PostgreSQL the user runs: a Debian cluster with settings of its own."""
    cluster = Cluster(cluster_name(), free_port())
    subprocess.run(
        [
            "pg_createcluster",
            PG_VERSION,
            cluster.name,
            "-p",
            str(cluster.port),
            "--start",
            "-o",
            "shared_buffers=32MB",
            "-o",
            "max_connections=20",
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    try:
        yield cluster
    finally:
        drop_cluster(cluster.name)


@needs_root
def test_services_refuse_the_port_of_a_postgres_they_did_not_start(
    users_cluster: Cluster,
) -> None:
    before = (users_cluster.started_at, users_cluster.auto_conf, users_cluster.settings())
    ours = cluster_name()
    rc, err = run(
        "services.sh", env={"HORAE_PG_PORT": str(users_cluster.port), "HORAE_PG_CLUSTER": ours}
    )
    assert rc != 0
    assert err == (
        f"services: port {users_cluster.port} on 127.0.0.1 is taken by PostgreSQL cluster "
        f"{PG_VERSION}/{users_cluster.name}, not Horae's PostgreSQL cluster '{ours}': "
        "set HORAE_PG_PORT to a free port (hack/services.sh env follows it)"
    )
    after = (users_cluster.started_at, users_cluster.auto_conf, users_cluster.settings())
    assert after == before
    assert before[2] == ("32MB", "20", "")


@needs_root
def test_services_leave_a_users_cluster_alone_even_under_horaes_cluster_name(
    users_cluster: Cluster,
) -> None:
    before = (users_cluster.started_at, users_cluster.auto_conf, users_cluster.settings())
    rc, err = run(
        "services.sh",
        env={"HORAE_PG_PORT": str(users_cluster.port), "HORAE_PG_CLUSTER": users_cluster.name},
    )
    assert rc != 0
    conf = f"/etc/postgresql/{PG_VERSION}/{users_cluster.name}/conf.d/horae.conf"
    assert err == (
        f"services: PostgreSQL cluster {PG_VERSION}/{users_cluster.name} was not made by "
        f"hack/services.sh (no {conf}): set HORAE_PG_CLUSTER to another name"
    )
    assert (users_cluster.started_at, users_cluster.auto_conf, users_cluster.settings()) == before


@needs_root
def test_services_refuse_a_postgres_port_another_process_holds() -> None:
    ours = cluster_name()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc, err = run(
            "services.sh",
            env={
                "HORAE_PG_PORT": str(port),
                "HORAE_PG_CLUSTER": ours,
                "HORAE_SERVICE_TIMEOUT": "5",
            },
        )
    assert rc != 0
    assert err == (
        f"services: port {port} on 127.0.0.1 is taken by another process, not Horae's "
        f"PostgreSQL cluster '{ours}': set HORAE_PG_PORT to a free port "
        "(hack/services.sh env follows it)"
    )


@needs_root
def test_services_create_horaes_own_cluster_beside_another_and_leave_both_running(
    users_cluster: Cluster,
) -> None:
    before = (users_cluster.started_at, users_cluster.auto_conf, users_cluster.settings())
    ours = Cluster(cluster_name(), free_port())
    env = {"HORAE_PG_PORT": str(ours.port), "HORAE_PG_CLUSTER": ours.name}
    try:
        rc, err = run("services.sh", env=env, timeout=180)
        assert rc == 0, err
        assert ours.settings() == ("1GB", "300", "pg_stat_statements")
        started = ours.started_at
        rc, err = run("services.sh", env=env)
        assert rc == 0, err
        assert ours.started_at == started  # already up: not restarted
        out = subprocess.run(
            [str(HACK / "services.sh"), "env"],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        url = f"postgresql://horae:horae@127.0.0.1:{ours.port}/horae"
        assert f"HORAE_DATABASE_URL={url}" in out.splitlines()
        answer = subprocess.run(
            ["psql", url, "-tAc", "select current_user"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        assert answer.strip() == "horae"
    finally:
        drop_cluster(ours.name)
    after = (users_cluster.started_at, users_cluster.auto_conf, users_cluster.settings())
    assert after == before

"""The chaos suite's own PostgreSQL cluster and RabbitMQ node.

Other tests and benchmarks share the servers hack/services.sh runs (Horae's PostgreSQL
cluster on 5433, RabbitMQ on 5672); the chaos suite restarts its servers on purpose, so it
runs private ones: a PostgreSQL cluster made by `initdb` in a temporary directory and a
RabbitMQ node with its own name, ports and Mnesia directory. Real servers, only private.
Run as root, each runs as its Debian package's user (`postgres`, `rabbitmq`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.kube import free_port

PG_BIN = Path(os.environ.get("HORAE_CHAOS_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _as(user: str, *cmd: str, env: dict[str, str] | None = None,
        timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:  # fmt: skip
    prefix = ["runuser", "-u", user, "--"] if os.geteuid() == 0 else []
    return subprocess.run([*prefix, *cmd], env=env, capture_output=True, text=True,
                          timeout=timeout, check=check)  # fmt: skip


def _own(path: Path, user: str) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, user, user)


@dataclass
class Postgres:
    dir: Path
    port: int

    @property
    def data(self) -> Path:
        return self.dir / "data"

    @property
    def url(self) -> str:
        return f"postgresql://horae:horae@127.0.0.1:{self.port}/horae"

    def _ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _as("postgres", str(PG_BIN / "pg_ctl"), "-D", str(self.data), *args, check=check)

    def psql(self, sql: str, db: str = "postgres") -> str:
        out = _as("postgres", str(PG_BIN / "psql"), "-h", str(self.dir), "-p", str(self.port),
                  "-d", db, "-v", "ON_ERROR_STOP=1", "-qtAc", sql)  # fmt: skip
        return out.stdout.strip()

    @classmethod
    def create(cls, base: Path) -> Postgres:
        base.mkdir(parents=True)
        base.chmod(0o755)
        _own(base, "postgres")
        pg = cls(base, free_port())
        _as("postgres", str(PG_BIN / "initdb"), "-D", str(pg.data), "-A", "trust",
            "-U", "postgres", "--no-sync")  # fmt: skip
        settings = {
            "listen_addresses": "'127.0.0.1'", "port": str(pg.port),
            "unix_socket_directories": f"'{base}'", "max_connections": "400",
            "shared_buffers": "64MB", "fsync": "off",  # servers are killed, never the OS
            "log_min_messages": "warning", "autovacuum_naptime": "5s",
        }  # fmt: skip
        with (pg.data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{k} = {v}\n" for k, v in settings.items())
        pg.start()
        pg.psql("CREATE ROLE horae LOGIN SUPERUSER PASSWORD 'horae'")
        pg.psql("CREATE DATABASE horae OWNER horae")
        return pg

    def start(self) -> None:
        self._ctl("-l", str(self.dir / "server.log"), "-w", "-t", "60", "start")

    def restart(self, mode: str = "fast") -> None:
        """`fast`: a clean shutdown; `immediate`: as a crash, with recovery at start."""
        self.stop(mode)
        self.start()

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "-w", "-t", "60", "stop")

    def destroy(self) -> None:
        self._ctl("-m", "immediate", "stop", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class RabbitMQ:
    dir: Path
    port: int
    node: str

    @property
    def url(self) -> str:
        return f"amqp://horae:horae@127.0.0.1:{self.port}/"

    def _env(self) -> dict[str, str]:
        d = self.dir
        return {
            "PATH": os.environ["PATH"], "HOME": str(d), "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1", "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()), "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"), "RABBITMQ_CONF_ENV_FILE": str(d / "env.conf"),
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(d / "pid"), "ERL_EPMD_ADDRESS": "127.0.0.1",
        }  # fmt: skip

    def ctl(self, *args: str, timeout: float = 90, check: bool = True) -> str:
        cookie = (self.dir / ".erlang.cookie").read_text().strip()
        out = subprocess.run(
            ["rabbitmqctl", "-q", "-n", self.node, "--erlang-cookie", cookie, *args],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if check and out.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout

    @classmethod
    def create(cls, base: Path) -> RabbitMQ:
        base.mkdir(parents=True)
        mq = cls(base, free_port(), f"horae-chaos-{os.getpid()}-{free_port()}@localhost")
        (base / "env.conf").write_text("")
        (base / "enabled_plugins").write_text("[].\n")
        (base / "rabbitmq.conf").write_text("loopback_users = none\n")
        for path in [base, *base.iterdir()]:
            _own(path, "rabbitmq")
        try:
            mq.start()
        except BaseException:
            mq.destroy()
            raise
        mq.ctl("add_user", "horae", "horae")
        mq.ctl("set_user_tags", "horae", "administrator")
        mq.ctl("set_permissions", "-p", "/", "horae", ".*", ".*", ".*")
        return mq

    def start(self) -> None:
        prefix = ["runuser", "-u", "rabbitmq", "--"] if os.geteuid() == 0 else []
        prefix += ["env", f"HOME={self.dir}"]  # runuser would set the user's own HOME
        log = (self.dir / "server.out").open("ab")
        subprocess.Popen([*prefix, "rabbitmq-server"], env=self._env(), stdout=log,
                         stderr=subprocess.STDOUT, start_new_session=True, cwd="/")  # fmt: skip
        deadline = time.monotonic() + 90
        while not (self.dir / ".erlang.cookie").exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"RabbitMQ node {self.node} wrote no cookie")
            time.sleep(0.2)
        self.ctl("await_startup", "--timeout", "90", timeout=100)

    def restart(self) -> None:
        """Stop and start the RabbitMQ application: every connection is dropped; durable
        queues and persistent messages survive."""
        self.ctl("stop_app")
        self.ctl("start_app")

    def destroy(self) -> None:
        if (self.dir / ".erlang.cookie").exists():
            self.ctl("stop", check=False, timeout=60)
        try:  # whatever `stop` left behind, by the node's own pid
            os.kill(int((self.dir / "pid").read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
        shutil.rmtree(self.dir, ignore_errors=True)

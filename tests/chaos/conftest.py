"""Fixtures of the chaos suite: its own PostgreSQL and RabbitMQ, restarted at will."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.servers import PG_BIN, Postgres, RabbitMQ


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "chaos: the chaos run (select with -m chaos)")


@pytest.fixture
def chaos_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's logs and report (kept, as pytest keeps its temporary directories)."""
    return tmp_path_factory.mktemp("chaos")


@pytest.fixture
def servers_dir() -> Iterator[Path]:
    """The private servers' data, which they reach as their own users: outside pytest's
    temporary root, which every pytest session that starts closes to other users again
    (mode 0700). A second session started during a chaos run (another test run, a helper
    running one test) left PostgreSQL unable to stop and RabbitMQ unable to start again,
    and the run lost every execution after that fault."""
    base = Path(tempfile.mkdtemp(prefix="horae-chaos-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def private_servers(servers_dir: Path) -> Iterator[tuple[Postgres, RabbitMQ]]:
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"no PostgreSQL server binaries in {PG_BIN} (set HORAE_CHAOS_PG_BIN)")
    postgres = Postgres.create(servers_dir / "postgres")
    try:
        rabbitmq = RabbitMQ.create(servers_dir / "rabbitmq")
    except BaseException:
        postgres.destroy()
        raise
    try:
        yield postgres, rabbitmq
    finally:
        rabbitmq.destroy()
        postgres.destroy()


@pytest.fixture
def second_postgres(
    servers_dir: Path, private_servers: tuple[Postgres, RabbitMQ]
) -> Iterator[Postgres]:
    """A second private PostgreSQL: the second store group of a two-group run."""
    postgres = Postgres.create(servers_dir / "postgres-second")
    try:
        yield postgres
    finally:
        postgres.destroy()

"""Fixtures of the chaos suite: its own PostgreSQL and RabbitMQ, restarted at will."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.servers import PG_BIN, Postgres, RabbitMQ


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "chaos: the chaos run (select with -m chaos)")


@pytest.fixture
def chaos_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("chaos")
    base.chmod(0o755)
    for parent in base.parents:  # the servers' own users must reach their directories
        if parent == Path("/tmp") or parent == Path("/"):
            break
        os.chmod(parent, parent.stat().st_mode | 0o055)
    return base


@pytest.fixture
def private_servers(chaos_dir: Path) -> Iterator[tuple[Postgres, RabbitMQ]]:
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"no PostgreSQL server binaries in {PG_BIN} (set HORAE_CHAOS_PG_BIN)")
    postgres = Postgres.create(chaos_dir / "postgres")
    try:
        rabbitmq = RabbitMQ.create(chaos_dir / "rabbitmq")
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
    chaos_dir: Path, private_servers: tuple[Postgres, RabbitMQ]
) -> Iterator[Postgres]:
    """A second private PostgreSQL: the second store group of a two-group run."""
    postgres = Postgres.create(chaos_dir / "postgres-second")
    try:
        yield postgres
    finally:
        postgres.destroy()

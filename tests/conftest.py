"""Session-wide real services for the suite.

- PostgreSQL: a migrated template database per session; each test gets its own
  copy (CREATE DATABASE ... TEMPLATE), made while the test before it ran and dropped
  after it in the background (tests/support/copies.py).
- RabbitMQ: a vhost per session; each test its own exchange/queue prefix.
- Kubernetes: etcd + kube-apiserver started once per session (hack/k8s-up.sh with
  HORAE_K8S_CONTROLLERS=0: no controller, scheduler or node spends the CPU) with Horae's
  CRDs applied; a fresh namespace per test. tests/e2e/test_chart_cluster.py starts a
  whole cluster of its own.

`make test` has already installed and started PostgreSQL and RabbitMQ
(hack/services.sh) and built the control-plane binaries (hack/build-k8s.sh).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest
import pytest_asyncio

from horae.store.db import connect, connect_pool
from horae.store.groups import MAIN
from horae.store.migrate import migrate, migrate_group
from tests.support.chart import bind_lease_roles, install_chart_accounts
from tests.support.copies import Copies, Database
from tests.support.db_roles import (
    LoginRoles,
    add_login_roles,
    create_login_roles,
    drop_login_roles,
)
from tests.support.groups import (
    SECOND,
    SECOND_DB,
    SplitTemplate,
    copy_split_store,
    create_database,
    drop_database,
    split_store,
    split_template,
    with_path,
)
from tests.support.kube import (
    ControlPlane,
    apply_crds,
    leave_no_horae_resources,
    start_control_plane,
    stop_control_plane,
)
from tests.support.processes import Processes
from tests.support.store_rows import StoreRows
from tests.support.vhosts import delete_abandoned, rabbitmqctl, session_vhost

BASE_DB = os.environ.get("HORAE_DATABASE_URL", "postgresql://horae:horae@127.0.0.1:5433/horae")
SPLIT = os.environ.get("HORAE_TEST_STORE", "one") == "split"
"""`make test` sets HORAE_TEST_STORE=split: every integration and e2e test then gets its
store split over two clusters (see `split`); the unit and API tests keep one group."""
BASE_MQ = os.environ.get("HORAE_BROKER_URL", "amqp://horae:horae@127.0.0.1:5672/horae")
REPO = Path(__file__).resolve().parents[1]


@pytest_asyncio.fixture(scope="session")
async def template_db() -> AsyncIterator[str]:
    name = f"horae_tmpl_{uuid.uuid4().hex[:8]}"
    try:
        admin = await asyncpg.connect(BASE_DB, timeout=10)
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.exit(
            f"PostgreSQL unreachable at {urlsplit(BASE_DB).netloc.split('@')[-1]}: {exc}"
            " (run hack/services.sh)",
            returncode=3,
        )
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        await migrate(with_path(BASE_DB, name))
    finally:
        await admin.close()
    yield name
    admin = await asyncpg.connect(BASE_DB, timeout=10)  # fresh: tests may restart the server
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture
def split(request: pytest.FixtureRequest) -> SplitTemplate | None:
    """Whether this test's store is split over two clusters: in the split run, for every
    integration and e2e test but the API tests and those marked `one_group` (which are
    about one database as such). If so, the split store the test's is a copy of (and the
    components' login roles are on the second cluster too)."""
    path = str(request.node.fspath)
    if not (
        SPLIT
        and ("/integration/" in path or "/e2e/" in path)
        and "/integration/api/" not in path
        and request.node.get_closest_marker("one_group") is None
    ):
        return None
    request.getfixturevalue("second_cluster_roles")
    template: SplitTemplate = request.getfixturevalue("split_template_db")
    return template


@pytest_asyncio.fixture(scope="session")
async def copies() -> AsyncIterator[Copies]:
    """Where each test's databases come from: made one test ahead (tests/support/copies.py)."""
    made = Copies()
    yield made
    await made.close()


@pytest_asyncio.fixture
async def db_url(
    template_db: str, split: SplitTemplate | None, copies: Copies
) -> AsyncIterator[str]:
    """A fresh migrated database for this test: the store's group `main`, which holds its
    catalog. In the split run (see `split`) the odd shards are in group `second`, on the
    second cluster (`second_url`)."""
    if split is not None:

        async def make_split(made: list[Database]) -> None:
            await copy_split_store(BASE_DB, made[0][1], made[1][1], split)

        made = await copies.take("split", [BASE_DB, SECOND_DB], make_split)
        url = with_path(BASE_DB, made[0][1])
        _SPLITS[url] = with_path(SECOND_DB, made[1][1])
    else:

        async def make_one(made: list[Database]) -> None:
            await create_database(BASE_DB, made[0][1], template_db)

        made = await copies.take("one", [BASE_DB], make_one)
        url = with_path(BASE_DB, made[0][1])
    yield url
    _SPLITS.pop(url, None)
    copies.drop(made)


_SPLITS: dict[str, str] = {}
"""The group `second` of each split test database, by the test database's URL."""


@pytest_asyncio.fixture(scope="session")
async def login_roles(template_db: str) -> AsyncIterator[LoginRoles]:
    """A login role per component in its group role (which `horae migrate` of the template
    created), for the whole session: every test database is a copy of the template, so
    the grants are there in each."""
    roles = await create_login_roles(BASE_DB, f"t_{uuid.uuid4().hex[:8]}")
    yield roles
    await drop_login_roles(BASE_DB, roles)


@pytest_asyncio.fixture(scope="session")
async def second_template() -> AsyncIterator[str]:
    """A migrated database on the second cluster that the second group of each test is a
    copy of (as `template_db` is on the first): `horae migrate` makes its group roles
    there too."""
    name = f"horae_tmpl2_{uuid.uuid4().hex[:8]}"
    url = await create_database(SECOND_DB, name)
    # As `horae store add-group` migrates a group: no catalog of its own.
    await migrate_group(url, shards=None, retention_days=None, ahead_days=3,
                        today=datetime.now(UTC).date(), catalog=False)  # fmt: skip
    yield name
    await drop_database(SECOND_DB, name)


@pytest_asyncio.fixture(scope="session")
async def split_template_db(template_db: str, second_template: str) -> AsyncIterator[SplitTemplate]:
    """A split store (`split_store`) that each split test's store is a copy of."""
    key = uuid.uuid4().hex[:8]
    made = await split_template(BASE_DB, f"horae_tmpls_{key}", f"horae_tmpls2_{key}",
                                template_db, second_template)  # fmt: skip
    yield made
    await drop_database(SECOND_DB, made.second)
    await drop_database(BASE_DB, made.main)


@pytest_asyncio.fixture(scope="session")
async def second_cluster_roles(
    login_roles: LoginRoles, second_template: str
) -> AsyncIterator[LoginRoles]:
    """The session's component login roles on the second cluster too (same names and
    password), as an administrator creates them there: a component reaches every store
    group with its own credentials, in the group roles `horae migrate` made there."""
    await add_login_roles(SECOND_DB, login_roles)
    yield login_roles
    await drop_login_roles(SECOND_DB, login_roles)


@pytest_asyncio.fixture
async def second_url(db_url: str, second_template: str) -> AsyncIterator[str]:
    """This test's store split over two clusters: `db_url`'s twin on the second one is
    group `second`, holding the odd shards (made by `db_url` itself in the split run)."""
    if db_url in _SPLITS:
        yield _SPLITS[db_url]
        return
    name = f"horae_g_{uuid.uuid4().hex[:10]}"
    url = await split_store(db_url, name, template=second_template)
    yield url
    await drop_database(SECOND_DB, name)


@pytest_asyncio.fixture
async def groups(db_url: str, second_url: str) -> AsyncIterator[dict[str, asyncpg.Connection]]:
    """A connection to each group's database, by group name: to see where rows are."""
    conns = {MAIN: await connect(db_url), SECOND: await connect(second_url)}
    yield conns
    for conn in conns.values():
        await conn.close()


@pytest_asyncio.fixture
async def stored(db_url: str) -> AsyncIterator[StoreRows]:
    """The test's store, every group of it: where a test reads rows and sets jobs up (in
    the split run, half of them are in `second`)."""
    urls = {MAIN: db_url} | ({SECOND: _SPLITS[db_url]} if db_url in _SPLITS else {})
    opened = await StoreRows.open(urls)
    yield opened
    await opened.close()


@pytest.fixture
def role_urls(db_url: str, login_roles: LoginRoles) -> dict[str, str]:
    """This test's database as each component's login role sees it."""
    return login_roles.urls(db_url)


@pytest_asyncio.fixture
async def pool(db_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await connect_pool(db_url, size=5)
    yield p
    await p.close()


@pytest.fixture(scope="session")
def broker_url() -> Iterator[str]:
    """A RabbitMQ vhost for this session (the base vhost when rabbitmqctl is not usable);
    vhosts of sessions that died are deleted first. Each test declares its own queues, and
    the broker deletes a queue unused for 10 min (twice the test timeout): the session holds
    only the last minutes' queues, not every test's (each costs the broker file handles)."""
    delete_abandoned()
    vhost = session_vhost()
    user = urlsplit(BASE_MQ).username or "horae"
    setup = [
        ["add_vhost", vhost],
        ["set_permissions", "-p", vhost, user, ".*", ".*", ".*"],
        ["set_policy", "-p", vhost, "--apply-to", "queues", "expiry", ".*", '{"expires":600000}'],
    ]
    if all(rabbitmqctl(*args) is not None for args in setup):
        yield with_path(BASE_MQ, vhost)
        rabbitmqctl("delete_vhost", vhost)
    else:
        yield BASE_MQ


@pytest.fixture
def broker_prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = start_control_plane(tmp_path_factory.mktemp("k8s"))
    try:
        apply_crds(plane)
        yield plane
    finally:
        stop_control_plane(plane)


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    control_plane.kubectl("create", "namespace", name)
    yield name
    leave_no_horae_resources(control_plane, name)


@pytest.fixture
def horae_env(
    db_url: str, broker_url: str, broker_prefix: str, control_plane: ControlPlane, namespace: str
) -> dict[str, str]:
    """The environment every `horae` process of this test gets."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("HORAE_")},
        **control_plane.env,
        "HORAE_DATABASE_URL": db_url,
        "HORAE_BROKER_URL": broker_url,
        "HORAE_BROKER_PREFIX": broker_prefix,
        "HORAE_NAMESPACE": namespace,
        "HORAE_LOG_LEVEL": "INFO",
    }


@pytest.fixture(scope="session")
def component_kubeconfigs(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Operator, scheduler and API run as the chart's ServiceAccounts under the chart's
    RBAC, never as admin."""
    return install_chart_accounts(control_plane, tmp_path_factory.mktemp("accounts"))


@pytest.fixture
def processes(
    horae_env: dict[str, str], tmp_path: Path, control_plane: ControlPlane, namespace: str,
    component_kubeconfigs: dict[str, Path], role_urls: dict[str, str],
) -> Iterator[Processes]:  # fmt: skip
    bind_lease_roles(control_plane, namespace)
    # Each component also connects to PostgreSQL as its own role, never as the owner.
    command_env: dict[str, dict[str, str]] = {
        c: {"HORAE_DATABASE_URL": url} for c, url in role_urls.items()
    }
    command_env["aggregated-api"] = {"HORAE_DATABASE_URL": role_urls["viewer"]}
    for c, path in component_kubeconfigs.items():
        command_env[c]["KUBECONFIG"] = str(path)
    procs = Processes(horae_env, tmp_path, command_env=command_env)
    yield procs
    procs.kill_all()
    print(procs.dump())  # shown by pytest only when the test failed


def pytest_collection_modifyitems(items: list[Any]) -> None:
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)

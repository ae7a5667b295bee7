"""A store split over two PostgreSQL clusters (hack/services.sh starts the second, horae2,
on port 5434): a test database on each, the second added to the first's catalog as group
`second` and given every odd shard, before anything runs."""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from horae.store.groups import address_of
from horae.store.moves import add_group, move_shards

SECOND_DB = os.environ.get(
    "HORAE_SECOND_DATABASE_URL", "postgresql://horae:horae@127.0.0.1:5434/horae"
)
SECOND = "second"


def with_path(url: str, path: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + path))


async def create_database(admin_url: str, name: str, template: str | None = None) -> str:
    admin = await asyncpg.connect(admin_url, timeout=10)
    try:
        await admin.execute(
            f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")
        )
    finally:
        await admin.close()
    return with_path(admin_url, name)


async def drop_database(admin_url: str, name: str) -> None:
    admin = await asyncpg.connect(admin_url, timeout=10)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def split_store(home_url: str, name: str, template: str | None = None) -> str:
    """Database `name` on the second cluster (a copy of `template`, when given), added as
    group `second` of the store whose catalog is at `home_url`, holding the odd shards;
    its URL."""
    url = await create_database(SECOND_DB, name, template)
    await add_group(home_url, SECOND, url)
    conn = await asyncpg.connect(home_url)
    try:
        shards = await conn.fetchval("SELECT shards FROM installation")
    finally:
        await conn.close()
    await move_shards(home_url, list(range(1, shards, 2)), SECOND)
    return url


@dataclass(frozen=True)
class SplitTemplate:
    """A split store to copy: making one with `split_store` takes seconds (migrating the
    group, moving the shards), copying it a fraction of one."""

    main: str
    """On the first cluster: the catalog's database, its odd shards placed in `second`."""
    second: str
    """On the second cluster: group `second`, holding the odd shards."""


async def split_template(admin_url: str, main: str, second: str, template: str,
                         second_template: str) -> SplitTemplate:  # fmt: skip
    """Databases `main` (a copy of `template`) and `second` (of `second_template`), split
    by `split_store`."""
    await split_store(await create_database(admin_url, main, template), second,
                      template=second_template)  # fmt: skip
    return SplitTemplate(main, second)


async def copy_split_store(admin_url: str, name: str, twin: str, template: SplitTemplate) -> str:
    """Database `name` a copy of `template.main`, and `twin` of `template.second`, as
    `split_store` would leave them: the catalog names `twin` as group `second`. The URL of
    `twin`."""
    url, twin_url = await asyncio.gather(  # one on each cluster: both at once
        create_database(admin_url, name, template.main),
        create_database(SECOND_DB, twin, template.second),
    )
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("UPDATE store_groups SET address = $1 WHERE name = $2",
                           address_of(twin_url), SECOND)  # fmt: skip
    finally:
        await conn.close()
    return twin_url


def job_in(shard: int, shards: int = 64, below: uuid.UUID | None = None) -> uuid.UUID:
    """A random job id whose shard is `shard` (and that sorts below `below`, when given)."""
    return next(
        u
        for u in iter(uuid.uuid4, None)
        if u.int % shards == shard and (below is None or u < below)
    )

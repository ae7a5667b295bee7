"""Login roles for the components' PostgreSQL group roles (migration 004), as an
administrator creates them: `CREATE ROLE ... LOGIN PASSWORD ... IN ROLE horae_<component>`.
Roles belong to the whole cluster, so their names are unique per test session."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg

COMPONENTS = ("api", "operator", "scheduler", "worker", "viewer")
"""Each the group role `horae_<name>` a migration made: `viewer` is the aggregated API's."""


@dataclass(frozen=True)
class LoginRoles:
    names: dict[str, str]
    """Login role by component."""
    password: str

    def url(self, db_url: str, component: str) -> str:
        """`db_url` (the owner's), connecting as `component`'s login role instead."""
        parts = urlsplit(db_url)
        host = parts.netloc.rsplit("@", 1)[-1]
        user = quote(self.names[component], safe="")
        return urlunsplit(parts._replace(netloc=f"{user}:{self.password}@{host}"))

    def urls(self, db_url: str) -> dict[str, str]:
        return {c: self.url(db_url, c) for c in self.names}


async def create_login_roles(admin_url: str, prefix: str) -> LoginRoles:
    roles = LoginRoles({c: f"{prefix}_{c}" for c in COMPONENTS}, secrets.token_hex(16))
    await add_login_roles(admin_url, roles)
    return roles


async def add_login_roles(admin_url: str, roles: LoginRoles) -> None:
    """`roles` in the cluster of `admin_url` (roles are cluster-wide: another cluster, a
    second store group's, gets the same names and password this way)."""
    admin = await asyncpg.connect(admin_url)
    try:
        for component, name in roles.names.items():
            # A role name and a password cannot be query parameters: both are made here.
            await admin.execute(
                f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{roles.password}'"
                f" IN ROLE horae_{component}"
            )
    finally:
        await admin.close()


async def drop_login_roles(admin_url: str, roles: LoginRoles) -> None:
    admin = await asyncpg.connect(admin_url)
    try:
        for name in roles.names.values():
            await admin.execute(f'DROP ROLE IF EXISTS "{name}"')
    finally:
        await admin.close()

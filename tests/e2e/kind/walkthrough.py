"""The README's "On a cluster (kind)" walkthrough, read as commands, so the kind test runs
exactly what a reader types and a fast test checks it against `services.yaml`."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from tests.support.kube import REPO

SERVICES = REPO / "tests" / "e2e" / "kind" / "services.yaml"
HEADING = "### On a cluster (kind"


def readme_commands(readme: Path = REPO / "README.md") -> list[list[str]]:
    """The walkthrough's commands, comments dropped and continued lines joined."""
    lines = readme.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(HEADING))
    fence = next(i for i in range(start, len(lines)) if lines[i].startswith("```sh"))
    end = next(i for i in range(fence + 1, len(lines)) if lines[i].startswith("```"))
    commands: list[list[str]] = []
    pending = ""
    for line in lines[fence + 1 : end]:
        pending += line.rstrip().removesuffix("\\")
        if line.rstrip().endswith("\\"):
            continue
        argv = shlex.split(pending, comments=True)
        if argv:
            commands.append(argv)
        pending = ""
    return commands


def services() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(SERVICES.read_text()) if doc]


def _container_env(name: str) -> dict[str, str]:
    deployment = next(d for d in services() if d["kind"] == "Deployment"
                      and d["metadata"]["name"] == name)  # fmt: skip
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"]}


def _service_address(name: str) -> str:
    service = next(d for d in services() if d["kind"] == "Service"
                   and d["metadata"]["name"] == name)  # fmt: skip
    port = service["spec"]["ports"][0]["port"]
    return f"{name}.{service['metadata']['namespace']}:{port}"


LOGIN_ROLE = re.compile(r"CREATE ROLE (\w+) LOGIN PASSWORD '([^']+)' IN ROLE horae_(\w+);")


def _login_roles() -> dict[str, tuple[str, str]]:
    """Component -> (login role, password), as the postgres-roles ConfigMap creates them."""
    config = next(d for d in services() if d["kind"] == "ConfigMap"
                  and d["metadata"]["name"] == "postgres-roles")  # fmt: skip
    return {c: (name, pw) for name, pw, c in LOGIN_ROLE.findall(config["data"]["roles.sql"])}


def service_urls() -> dict[str, str]:
    """Secret name -> the URL that reaches what services.yaml runs, with its credentials:
    the schema owner's, each component's login role's, RabbitMQ's."""
    pg = _container_env("postgres")
    mq = _container_env("rabbitmq")
    at = f"@{_service_address('postgres')}/{pg['POSTGRES_DB']}"
    return {
        "horae-postgres": f"postgresql://{pg['POSTGRES_USER']}:{pg['POSTGRES_PASSWORD']}{at}",
        **{f"horae-postgres-{c}": f"postgresql://{name}:{pw}{at}"
           for c, (name, pw) in _login_roles().items()},
        "horae-rabbitmq": f"amqp://{mq['RABBITMQ_DEFAULT_USER']}:{mq['RABBITMQ_DEFAULT_PASS']}"
        f"@{_service_address('rabbitmq')}/",
    }  # fmt: skip

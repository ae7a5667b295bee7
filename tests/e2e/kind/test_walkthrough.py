"""The README's kind walkthrough is complete as written: it runs the throwaway services
before anything needs them and hands Horae the URLs that reach them. Runs everywhere (no
Docker needed); test_kind.py runs the same commands on a real kind cluster."""

from __future__ import annotations

from tests.e2e.kind.walkthrough import SERVICES, readme_commands, service_urls
from tests.support.kube import REPO


def index_of(commands: list[list[str]], *prefix: str) -> int:
    matches = [i for i, c in enumerate(commands) if c[: len(prefix)] == list(prefix)]
    assert matches, f"the README's kind walkthrough has no `{' '.join(prefix)}`"
    return matches[0]


def test_walkthrough_applies_the_services_before_the_install_needs_them() -> None:
    commands = readme_commands()
    applied = index_of(commands, "kubectl", "apply", "-f", str(SERVICES.relative_to(REPO)))
    install = index_of(commands, "helm", "install")
    assert index_of(commands, "kubectl", "create", "namespace", "horae-system") < applied
    for deployment in ("postgres", "rabbitmq"):
        ready = index_of(commands, "kubectl", "-n", "horae-system", "rollout", "status",
                         f"deployment/{deployment}")  # fmt: skip
        assert applied < ready < install


def test_walkthrough_secrets_reach_the_services_it_applies() -> None:
    commands = readme_commands()
    secrets = {
        c[6]: c[7].removeprefix("--from-literal=url=")
        for c in commands
        if c[:6] == ["kubectl", "-n", "horae-system", "create", "secret", "generic"]
    }
    assert secrets == service_urls()


def test_walkthrough_names_only_files_that_exist() -> None:
    named = [arg for c in readme_commands() for arg in c
             if "/" in arg and not arg.startswith(("--", "deployment/"))]  # fmt: skip
    assert named, "no file named in the walkthrough"
    missing = [arg for arg in named if not (REPO / arg).exists()]
    assert not missing, missing

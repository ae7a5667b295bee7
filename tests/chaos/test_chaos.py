"""Nothing acknowledged is lost, nothing is run twice at once, nothing is left stuck, under
a seeded schedule of crashes, pauses, restarts and cut connections.

The short run here is part of `make test` (fixed seed). `make chaos SEED=... DURATION=...`
runs longer ones; see docs/reliability.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.harness import Run, Settings
from tests.chaos.servers import Postgres, RabbitMQ
from tests.support.chart import INSTALL_NAMESPACE
from tests.support.kube import ControlPlane

SETTINGS = Settings.from_env()


@pytest.mark.chaos
@pytest.mark.e2e
@pytest.mark.timeout(SETTINGS.duration + 600)  # set-up, calm and quiescence besides faults
async def test_acknowledged_jobs_survive_a_seeded_fault_schedule(
    control_plane: ControlPlane, namespace: str, component_kubeconfigs: dict[str, Path],
    private_servers: tuple[Postgres, RabbitMQ], chaos_dir: Path,
) -> None:  # fmt: skip
    for role in ("operator-leader", "scheduler"):  # Leases in the run's namespace
        control_plane.kubectl(
            "create", "rolebinding", f"horae-{role}", "-n", namespace,
            f"--clusterrole=horae-{role}",
            f"--serviceaccount={INSTALL_NAMESPACE}:horae-{role.split('-')[0]}",
        )  # fmt: skip
    postgres, rabbitmq = private_servers
    run = Run(SETTINGS, control_plane, namespace, component_kubeconfigs, chaos_dir,
              postgres, rabbitmq)  # fmt: skip
    try:
        report, text = await run.go()
    finally:
        run.close()
    print(text)
    if not report.ok:
        print(run.post_mortem(report))
        print(run.procs.dump())
    assert report.ok, f"the checker found violations (history in {chaos_dir}):\n{text}"

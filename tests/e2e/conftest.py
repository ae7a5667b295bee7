"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import pytest

from tests.support.processes import Processes


@pytest.fixture
def tenant_t_workers(processes: Processes) -> None:
    """Workers that serve the tenant `t` that the tests' jobs are created for (a worker
    serves its pool namespace's tenant unless given `HORAE_TENANTS`, as the operator gives
    a shared pool in Horae's namespace)."""
    processes.env["HORAE_TENANTS"] = "t"

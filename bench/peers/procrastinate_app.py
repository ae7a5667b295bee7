"""The Procrastinate app and its no-op task, apart from the driver so that the workers
(`python -m procrastinate --app bench.peers.procrastinate_app.app worker`) import it
rather than the driver's `__main__`."""

from __future__ import annotations

import os

import procrastinate

from bench.peers.common import BASE_DB, record

DB_ENV = "BENCH_PEERS_DATABASE_URL"
APP = "bench.peers.procrastinate_app.app"
POOL = {"min_size": 4, "max_size": 16}  # per process: a fetch plus up to 64 completions


def make_app(conninfo: str) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo, **POOL))

    @app.task(name="bench.noop")
    async def noop(seq: int) -> None:
        record(seq)

    return app


app = make_app(os.environ.get(DB_ENV, BASE_DB))

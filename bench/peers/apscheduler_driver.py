"""APScheduler 3 as a peer: date-triggered jobs in a SQLAlchemy job store on Postgres,
one scheduler process that also runs them.

    .venv-peers/bin/python -m bench.peers.apscheduler_driver --scenario sustained --rate R --seconds S
    .venv-peers/bin/python -m bench.peers.apscheduler_driver --scenario top --count N [--lead S]

APScheduler 3 has no separate workers: the scheduler process runs each due job in its
executor (a thread pool of 20 here; a process pool would pickle every job to a child,
slower for a no-op). Jobs are added through that process (see `apscheduler_server`:
its scheduler only notices jobs it added itself), each second's list in one RPC call,
~2 s ahead; inside, `add_job` is one INSERT per job, as APScheduler does it.
"""  # noqa: E501

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime
from multiprocessing.connection import Client, Connection

from bench.load import Arrival
from bench.peers.apscheduler_server import AUTHKEY, DB_ENV, THREADS
from bench.peers.common import (
    RECORD_DIR_ENV,
    Args,
    Processes,
    fresh_database,
    parse_args,
    python_m,
    report,
    result,
    run_dir,
    run_load,
    version,
)

CHUNK = 1000  # jobs per RPC call
# ~4 ms per add_job here (one INSERT each): the top scenario's default lead allows for it
CREATE_S = 0.005


def connect(socket: str, processes: Processes, seconds: float) -> Connection:
    deadline = time.monotonic() + seconds
    while True:
        try:
            return Client(socket, family="AF_UNIX", authkey=AUTHKEY)
        except (FileNotFoundError, ConnectionRefusedError):
            processes.check_alive()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


async def drive(args: Args) -> None:
    with run_dir() as records, fresh_database("apscheduler") as db:
        socket = str(records / "rpc.sock")
        processes = Processes({**os.environ, RECORD_DIR_ENV: str(records), DB_ENV: db})
        try:
            processes.start("scheduler", python_m("bench.peers.apscheduler_server", socket))
            with connect(socket, processes, 60) as rpc:
                arrivals = args.arrivals(datetime.now(UTC))

                async def create(group: list[Arrival]) -> None:
                    for i in range(0, len(group), CHUNK):
                        rpc.send([(a.seq, a.due) for a in group[i : i + CHUNK]])
                        rpc.recv()

                late, peak = await run_load(args, arrivals, records, processes, create)
        finally:
            processes.stop()
        notes = (
            f"apscheduler {version('apscheduler')}: 1 BlockingScheduler process, "
            f"SQLAlchemyJobStore (psycopg 3) on Postgres, ThreadPoolExecutor({THREADS}), "
            f"misfire_grace_time None; date-trigger jobs added through the scheduler "
            f"process by RPC ({CHUNK}/call), last creation {late:+.2f}s vs deadline."
        )
        report(result("apscheduler", args, arrivals, records, peak, notes))


if __name__ == "__main__":
    asyncio.run(drive(parse_args(__doc__, create_seconds_per_job=CREATE_S)))

"""The peers of the benchmark: what users would pick instead of Horae, driven by the same
load (`bench.load`) on the same PostgreSQL and RabbitMQ, from an environment of their own
(`make peers-venv` -> `.venv-peers`, pins in `requirements.txt`; no Horae import).

One driver per peer, each runnable from the repo root and printing one `Result` JSON line
as the last line of stdout (a human summary goes to stderr):

    .venv-peers/bin/python -m bench.peers.procrastinate_driver --scenario sustained --rate R --seconds S
    .venv-peers/bin/python -m bench.peers.celery_driver --scenario top --count N [--lead S]
    .venv-peers/bin/python -m bench.peers.apscheduler_driver ...

- `procrastinate_driver` (+ `procrastinate_app`): jobs deferred with `schedule_at`,
  two `procrastinate worker` processes.
- `celery_driver` (+ `celery_app`): ETA tasks on RabbitMQ, two `celery worker` processes,
  no result backend.
- `apscheduler_driver` (+ `apscheduler_server`): APScheduler 3, date triggers in a
  SQLAlchemy job store on Postgres, one scheduler process that runs the jobs too.
- `common`: arguments, a fresh database, child processes, the handler's record, pacing.

As for Horae, a sustained run creates each second's jobs ~2 s before that second, and a
top-of-the-hour run creates all N before they fall due together; the handler is a no-op
that notes (seq, start time) in a per-process file, read back at the end.
"""  # noqa: E501

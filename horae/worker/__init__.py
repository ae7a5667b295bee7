"""Workers: the task SDK application teams import, and the runtime that runs it.

`sdk` holds `@task`, `TaskContext` and the registry; `runtime` consumes a
pool's queue, claims executions in Postgres, runs handlers, records outcomes
and acks. Nothing here schedules, serves HTTP or talks to Kubernetes.
"""

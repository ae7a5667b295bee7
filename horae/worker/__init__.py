"""Workers: the task SDK application teams import, and the runtime that runs it.

`sdk` holds `@task`, `TaskContext` and the registry of declared tasks. The runtime is
two layers: `messages` consumes a pool's queue (parsing, dead-lettering, claims, acks,
hand-back) and `execution` runs what was claimed (holding until due, handlers, outcomes,
heartbeats), both writing each execution in its shard's store group (`routing`);
`runtime` builds a `Worker` of both for the tasks it is given and runs the process.
Nothing here schedules, serves HTTP or talks to Kubernetes.
"""

"""The operator (kopf): ScheduledJob resources -> jobs in the store; store changes ->
ScheduledJob status, Execution mirrors and Events; WorkerPools -> Deployments scaled on
their queue's depth; a resync pass for drift; one leader at a time; the operator's own
metrics (`measuring`).

Nothing here dispatches, runs handlers or serves the HTTP API.
"""

"""The operator (kopf): ScheduledJob resources -> jobs in the store, and store changes ->
ScheduledJob status. Later: Execution mirrors, WorkerPool scaling, Events.

Nothing here dispatches, runs handlers or serves the HTTP API.
"""

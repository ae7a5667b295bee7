"""Horae: a Kubernetes-native scheduler for timed tasks.

The public surface for task authors:

    from horae import task, TaskContext, RetryableError, PermanentError
"""

from horae.errors import HoraeError, PermanentError, RetryableError
from horae.worker.sdk import TaskContext, current_context, task

__all__ = [
    "HoraeError",
    "PermanentError",
    "RetryableError",
    "TaskContext",
    "current_context",
    "task",
]

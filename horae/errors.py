"""Horae's exceptions.

    HoraeError                    root of everything Horae raises on purpose
    ├── ConfigError               bad or missing HORAE_* setting
    ├── NotFound                  a job or execution that does not exist (for this tenant)
    ├── Conflict                  a write that contradicts the current state
    ├── QuotaExceeded             a write that would take a tenant over one of its quotas
    ├── StoreError                the job store failed (the driver's error is its __cause__)
    │   ├── StoreUnavailable      no usable connection: refused, lost, cut mid-operation, too
    │   │                         many connections, the server shutting down (retryable)
    │   ├── TransactionAborted    rolled back to break a deadlock: safe to run again
    │   ├── ShardBusy             a shard's epoch is held by its previous owner's dispatch
    │   └── ShardMoved            a shard no longer lives in the group asked (re-read the
    │                             catalog and ask its group)
    ├── LeaseConflict             a Kubernetes Lease changed or created by someone else first
    ├── ObjectChanged             a Kubernetes object changed since the version a write named
    └── TaskError                 raised by task handlers to steer the outcome
        ├── RetryableError        try again later (optionally after `delay`)
        └── PermanentError        never try again

Adapter errors are translated at the boundary with ``raise ... from``. The job store
(`horae.store`) lets no asyncpg error out: each becomes a `StoreError` (a unique key taken
by a concurrent write: `Conflict`), so no component knows the driver. aio-pika and
Kubernetes errors are translated where a caller can act on them; elsewhere they are left
to propagate and are classified as retryable by the worker.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta


class HoraeError(Exception):
    """Root of all errors Horae raises on purpose."""


class ConfigError(HoraeError):
    """A HORAE_* setting is missing or malformed."""


class PartFailed(HoraeError):
    """A long-running part of a process ended on its own; the process stopped (`supervise`)."""


class NotFound(HoraeError):
    """The job or execution does not exist, or belongs to another tenant."""


class Conflict(HoraeError):
    """The write contradicts the current state (e.g. an idempotency key reused)."""


class QuotaExceeded(HoraeError):
    """The write would take a tenant over one of its quotas (`quota`: `max_jobs` or
    `max_fires_per_minute`); an administrator can raise it."""

    def __init__(self, tenant: str, quota: str, limit: int, used: float, adding: float) -> None:
        super().__init__(
            f"tenant {tenant} is at its quota {quota}={limit}: {used:g} in use, this adds "
            f"{adding:g} (an administrator can raise it: horae tenants set {tenant} "
            f"--{quota.replace('_', '-')} N)"
        )
        self.tenant = tenant
        self.quota = quota
        self.limit = limit


class StoreError(HoraeError):
    """The job store failed; the driver's error is the `__cause__`. Not one of the kinds
    below: the statement itself failed (a bug, or data the schema refuses)."""


class StoreUnavailable(StoreError):
    """No usable connection to Postgres: refused, lost or cut mid-operation, too many
    connections, the server shutting down or starting. Whether a write in flight committed
    is unknown; try again once it is back."""


class TransactionAborted(StoreError):
    """Postgres rolled the transaction back to break a deadlock (or a serialization
    conflict): nothing of it was written, and running it again is safe."""


class ShardBusy(StoreError):
    """A shard's fencing epoch is still held by a dispatch of its previous owner: taking the
    shard waited as long as it may (`store.dispatch.TAKE_LOCK_TIMEOUT_MS`); try later."""


class ShardMoved(StoreError):
    """A shard moved to another store group: its jobs are no longer created, taken or
    dispatched in the group asked. The caller re-reads the catalog and asks the new group."""

    def __init__(self, shards: Iterable[int], message: str = "") -> None:
        self.shards = sorted(shards)
        super().__init__(message or f"shards {self.shards} moved to another store group")


class LeaseConflict(HoraeError):
    """Someone else changed or created the Lease first (the API server's 409, or 404 on a
    replace: it was deleted)."""


class ObjectChanged(HoraeError):
    """A Kubernetes object changed since the resourceVersion a write named (the API server's
    409): read it again, then write."""


class TaskError(HoraeError):
    """Base for exceptions a task handler raises to choose its outcome."""


class RetryableError(TaskError):
    """A transient failure: the execution is retried per the job's retry policy.

    `delay` overrides the computed backoff for the next attempt.
    """

    def __init__(self, message: str = "", *, delay: timedelta | None = None) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentError(TaskError):
    """A failure that will not go away by retrying: the execution fails at once."""

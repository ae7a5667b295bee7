"""Settings, read from HORAE_* environment variables at the entry point only.

Each field documents its unit and default. Durations are `timedelta`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import urlsplit

from horae.errors import ConfigError

MAX_DISPATCH_LEAD = 10.0
"""Seconds: the longest dispatch lead (the burst lead included). A worker claims an early
execution as it arrives and holds it, without a handler slot, until it is due."""
MAX_DISPATCH_INTERVAL = 1.0
"""Seconds: the longest interval between dispatch rounds (HORAE_DISPATCH_INTERVAL_SECONDS)."""


def env_seconds(
    env: Mapping[str, str],
    name: str,
    default: float,
    *,
    zero: bool = False,
    most: float | None = None,
) -> timedelta:
    """A duration setting in seconds (> 0, or >= 0 with `zero`; at most `most`);
    ConfigError names the variable."""
    raw = env.get(name)
    if raw is None:
        return timedelta(seconds=default)
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected seconds as a number, got {raw!r}") from None
    if value < 0 or (value == 0 and not zero) or value != value:
        raise ConfigError(f"{name}: must be {'>=' if zero else '>'} 0, got {raw!r}")
    if most is not None and value > most:
        raise ConfigError(f"{name}: must be at most {most:g}, got {raw!r}")
    return timedelta(seconds=value)


def _member_lease(env: Mapping[str, str]) -> tuple[timedelta, timedelta]:
    """A scheduler's member Lease: (duration, renew period). A period not below the
    duration would let the Lease lapse between two renewals of a healthy replica, whose
    shards would then change hands for ever."""
    duration = env_seconds(env, "HORAE_LEASE_DURATION_SECONDS", 3)
    period = env_seconds(env, "HORAE_RENEW_PERIOD_SECONDS", 1)
    if period >= duration:
        raise ConfigError(
            f"HORAE_RENEW_PERIOD_SECONDS: must be less than HORAE_LEASE_DURATION_SECONDS "
            f"({duration.total_seconds():g}), got {period.total_seconds():g}"
        )
    return duration, period


def _url(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name) or None
    if raw is not None and urlsplit(raw).scheme not in ("http", "https"):
        raise ConfigError(f"{name}: expected an http(s) URL, got {raw!r}")
    return raw


def _int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 1) -> int:
    raw = env.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name}: must be >= {minimum}, got {raw!r}")
    return value


def _tenants(env: Mapping[str, str], default: str) -> tuple[str, ...]:
    raw = env.get("HORAE_TENANTS")
    if raw is None:
        return (default,)
    tenants = tuple(sorted({t.strip() for t in raw.split(",")}))
    if not tenants or any(not t or len(t) > 253 or "\x00" in t for t in tenants):
        raise ConfigError(
            f"HORAE_TENANTS: expected comma-separated tenant names (1-253 characters), got {raw!r}"
        )
    return tenants


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw not in ("", "0", "1", "true", "false"):
        raise ConfigError(f"{name}: expected 1 or 0 (true or false), got {env[name]!r}")
    return raw in ("1", "true")


def _optional_int(env: Mapping[str, str], name: str, *, most: int | None = None) -> int | None:
    if not env.get(name):
        return None
    value = _int(env, name, 0)
    if most is not None and value > most:
        raise ConfigError(f"{name}: must be at most {most}, got {env[name]!r}")
    return value


@dataclass(frozen=True, kw_only=True)
class DatabaseSettings:
    url: str = "postgresql://horae:horae@127.0.0.1:5433/horae"
    """HORAE_DATABASE_URL: asyncpg DSN of the Postgres primary."""
    pool_size: int = 10
    """HORAE_DATABASE_POOL_SIZE: connections per process."""
    shards: int | None = None
    """HORAE_SHARDS: read by `horae migrate` only. Virtual shards of a new installation
    (64 when unset); fixed once it exists, and every process reads it from the database."""
    retention_days: int | None = None
    """HORAE_RETENTION_DAYS: read by `horae migrate` only. Execution history kept, in whole
    daily partitions (30 for a new installation when unset; unset keeps what the
    installation has). Stored in the database, where partition maintenance reads it."""
    partitions_ahead_days: int = 3
    """HORAE_PARTITIONS_AHEAD_DAYS: daily partitions created ahead of today."""

    def __repr__(self) -> str:  # never print the password
        return f"DatabaseSettings(url=<redacted>, pool_size={self.pool_size})"


@dataclass(frozen=True, kw_only=True)
class BrokerSettings:
    url: str = "amqp://horae:horae@127.0.0.1:5672/horae"
    """HORAE_BROKER_URL: AMQP URL of RabbitMQ, vhost included."""
    prefix: str = "horae"
    """HORAE_BROKER_PREFIX: prefix of every exchange and queue name (`horae.dispatch`, ...)."""

    def __repr__(self) -> str:
        return f"BrokerSettings(url=<redacted>, prefix={self.prefix!r})"


@dataclass(frozen=True, kw_only=True)
class KubeSettings:
    namespace: str = "default"
    """HORAE_NAMESPACE: namespace of the scheduler's shard and member Leases."""
    kubeconfig: str | None = None
    """KUBECONFIG: path of a kubeconfig; None means in-cluster configuration."""


@dataclass(frozen=True, kw_only=True)
class SchedulerSettings:
    lease_duration: timedelta = timedelta(seconds=3)
    """HORAE_LEASE_DURATION_SECONDS: a replica whose member Lease was not renewed for this
    long is gone, and the shard Leases naming it are free."""
    renew_period: timedelta = timedelta(seconds=1)
    """HORAE_RENEW_PERIOD_SECONDS: how often the member Lease is renewed and free shards taken.
    After a crash the others take its shards a lease_duration after its last renewal."""
    preload_window: timedelta = timedelta(seconds=60)
    """HORAE_PRELOAD_WINDOW_SECONDS: executions due within this window are held in memory."""
    preload_max_rows: int = 100_000
    """HORAE_PRELOAD_MAX_ROWS: the most executions a replica holds in memory (the earliest
    due); more due within the window are read as these are dispatched. Bounds the
    scheduler's memory whatever is due (about 1 KiB each: docs/operations.md)."""
    refresh_period: timedelta = timedelta(seconds=2)
    """HORAE_REFRESH_PERIOD_SECONDS: how often the window is re-read from Postgres."""
    redelivery_timeout: timedelta = timedelta(seconds=60)
    """HORAE_REDELIVERY_TIMEOUT_SECONDS: a queued execution unclaimed this long is republished."""
    dispatch_lead: timedelta = timedelta(0)
    """HORAE_DISPATCH_LEAD_SECONDS: every execution is published up to this long before it is
    due (0, the default: at the due moment, unless in a burst); a worker claims one as it
    arrives (its lease counted from the due time) and starts it once due by Postgres's
    clock. Executions of Forbid, Replace and BufferOne jobs are published at the due moment,
    so that whether the previous occurrence still runs is judged then. At most
    MAX_DISPATCH_LEAD. Off by default: a pause or edit after the claim no longer stops the
    run, and a worker killed holding claims ahead leaves them to another about 2 s after
    their due times (docs/operations.md); bursts have their own lead, `burst_lead`."""
    burst_lead: timedelta = timedelta(seconds=2)
    """HORAE_BURST_LEAD_SECONDS: a burst (`burst_size` or more executions due within one
    quarter second, on this replica's shards) is published this long before it is due, or
    longer for a larger one (a second per `BURST_CLAIMS_PER_SECOND`), at most
    MAX_DISPATCH_LEAD: its claims happen before the instant, and at the instant the workers
    only start handlers (2 s, the default: 20,000 due at once start with p99 0.5 s instead
    of 2.7 s). 0 turns it off."""
    burst_size: int = 1_000
    """HORAE_BURST_SIZE: executions due within one quarter second that make a burst (1,000:
    4,000 a second at once, above a sustained rate's share of a replica)."""
    dispatch_interval: timedelta = timedelta(milliseconds=50)
    """HORAE_DISPATCH_INTERVAL_SECONDS: dispatch rounds start at most this often (0.05, the
    default); what falls due between two goes out in the next one, so a steady rate
    travels in fewer, fuller messages (up to 100 executions of a tenant and task each)
    rather than a message or two per execution: at 2,000 one-offs a second it cut the CPU
    per execution, every process with PostgreSQL and RabbitMQ, by about 40 %, for about
    12 ms more median start lag (docs/performance.md). 0: a round as soon as anything is
    due. At most MAX_DISPATCH_INTERVAL."""
    dead_webhook: str | None = None
    """HORAE_DEAD_WEBHOOK_URL: POST a JSON event here for each execution the reaper finds
    dead (its last attempt's worker stopped heartbeating); workers send the others."""
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    """HORAE_IDENTITY: this replica's name in Leases; hostname-pid by default."""


@dataclass(frozen=True, kw_only=True)
class WorkerSettings:
    pool: str = "default"
    """HORAE_POOL: the WorkerPool whose queue this worker consumes."""
    pool_namespace: str = "default"
    """HORAE_POOL_NAMESPACE: that WorkerPool's namespace; HORAE_NAMESPACE when unset. The
    queue is `<prefix>.pool.<namespace>.<pool>`."""
    tenants: tuple[str, ...] = ("default",)
    """HORAE_TENANTS: the tenants (namespaces) whose executions this worker runs, comma
    separated; the pool's namespace when unset. The operator sets it for a WorkerPool's
    workers: the pool's namespace, or the `tenants` an administrator gave a pool in Horae's
    own namespace. A message for any other tenant is dead-lettered, never run."""
    concurrency: int = 16
    """HORAE_CONCURRENCY: handlers run at once; also the queue prefetch."""
    lease: timedelta = timedelta(seconds=30)
    """HORAE_EXECUTION_LEASE_SECONDS: a running execution not heartbeated this long is lost."""
    broker_heartbeat: int = 1
    """HORAE_BROKER_HEARTBEAT_SECONDS: the AMQP heartbeat timeout the worker asks for. A
    worker that stops answering for about twice this long (frozen, its host cut off) has
    its connection closed by RabbitMQ, and the messages it had been handed but had not
    started go to the other workers at once: without it they waited for the broker's
    default heartbeat (60 s) or the reaper's redelivery timeout (60 s). 1 s keeps them
    within 3 s of their due time under 1,000/s (bench.horae_driver --scenario
    worker-faults); 2 s let them wait up to 5-6 s. 0 leaves it to the broker."""
    consumer_timeout: timedelta = timedelta(minutes=30)
    """HORAE_BROKER_CONSUMER_TIMEOUT_SECONDS: RabbitMQ's consumer_timeout. A handler that may
    run longer than half of it (or has no timeout) has its message acked once its claim
    holds a lease; the lease and the reaper protect it from then on."""
    shutdown_grace: timedelta = timedelta(seconds=25)
    """HORAE_SHUTDOWN_GRACE_SECONDS: on SIGTERM, how long running handlers may finish."""
    stop_wait: timedelta = timedelta(seconds=5)
    """After the grace period, how long a stopped (cancelled) handler may take to clean up
    before its execution is handed back (not a setting: the pod's termination grace of a
    WorkerPool counts on it)."""
    dead_webhook: str | None = None
    """HORAE_DEAD_WEBHOOK_URL: POST a JSON event here for each execution that ends `dead`."""
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    """HORAE_IDENTITY: this worker's name as lease owner."""


@dataclass(frozen=True, kw_only=True)
class OperatorSettings:
    lease_duration: timedelta = timedelta(seconds=15)
    """HORAE_OPERATOR_LEASE_SECONDS: the leader Lease, renewed every third of it; a
    standby replica takes over this long after the last renewal it saw (so 10-15 s after a
    crash by default), and as soon as a leader stopping cleanly releases it."""
    resync_period: timedelta = timedelta(seconds=60)
    """HORAE_RESYNC_SECONDS: how often resources and store are compared to heal drift."""
    scale_down_stabilization: timedelta = timedelta(seconds=300)
    """HORAE_SCALE_DOWN_STABILIZATION_SECONDS: a WorkerPool scales down only after its
    desired replicas stayed lower for this long."""
    autoscale_period: timedelta = timedelta(seconds=5)
    """HORAE_AUTOSCALE_PERIOD_SECONDS: how often each WorkerPool's queue depth is read and
    its Deployment scaled (a scale-up waits at most this long)."""
    scale_ahead: timedelta = timedelta(seconds=60)
    """HORAE_SCALE_AHEAD_SECONDS: a worker pod's start-up time (scheduling, image pull,
    start, readiness probe). A Builtin WorkerPool is scaled for the executions falling due
    within this (plus one autoscale period) before they are due, so that its pods are Ready
    when they are; 0 scales on the queue alone; at most 600 (a pool held scaled out for
    longer before a spike only costs)."""
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    """HORAE_IDENTITY: this replica's name as holder of the leader Lease."""
    status_interval: timedelta = timedelta(seconds=10)
    """HORAE_STATUS_INTERVAL_SECONDS: the most often a ScheduledJob's status is written when
    only its times changed (last and next run); a change of what it says is written at once."""
    execution_mirror: bool = False
    """HORAE_EXECUTION_MIRROR: `1` mirrors each ScheduledJob's newest executions into etcd as
    Execution resources of horae.dev (the CRD), for clusters that cannot run the aggregated
    API; off by default: `kubectl get executions` reads the store through runs.horae.dev."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    broker: BrokerSettings = field(default_factory=BrokerSettings)
    kube: KubeSettings = field(default_factory=KubeSettings)
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    operator: OperatorSettings = field(default_factory=OperatorSettings)
    metrics_port: int = 0
    """HORAE_METRICS_PORT: serve Prometheus /metrics, /healthz and /readyz on this port (0:
    off)."""
    liveness_stall: timedelta = timedelta(seconds=30)
    """HORAE_LIVENESS_STALL_SECONDS: /healthz fails once the event loop has not turned for
    this long (horae/probes.py; the API's processes too)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        identity = env.get("HORAE_IDENTITY")
        sched_defaults = SchedulerSettings()
        worker_defaults = WorkerSettings()
        namespace = env.get("HORAE_NAMESPACE", KubeSettings.namespace)
        pool_namespace = env.get("HORAE_POOL_NAMESPACE") or namespace
        lease_duration, renew_period = _member_lease(env)
        return cls(
            database=DatabaseSettings(
                url=env.get("HORAE_DATABASE_URL", DatabaseSettings.url),
                pool_size=_int(env, "HORAE_DATABASE_POOL_SIZE", DatabaseSettings.pool_size),
                shards=_optional_int(env, "HORAE_SHARDS", most=4096),
                retention_days=_optional_int(env, "HORAE_RETENTION_DAYS"),
                partitions_ahead_days=_int(
                    env,
                    "HORAE_PARTITIONS_AHEAD_DAYS",
                    DatabaseSettings.partitions_ahead_days,
                    minimum=2,
                ),
            ),
            broker=BrokerSettings(
                url=env.get("HORAE_BROKER_URL", BrokerSettings.url),
                prefix=env.get("HORAE_BROKER_PREFIX", BrokerSettings.prefix),
            ),
            kube=KubeSettings(
                namespace=namespace,
                kubeconfig=env.get("KUBECONFIG") or None,
            ),
            scheduler=SchedulerSettings(
                lease_duration=lease_duration,
                renew_period=renew_period,
                preload_window=env_seconds(env, "HORAE_PRELOAD_WINDOW_SECONDS", 60),
                preload_max_rows=_int(
                    env, "HORAE_PRELOAD_MAX_ROWS", SchedulerSettings.preload_max_rows
                ),
                refresh_period=env_seconds(env, "HORAE_REFRESH_PERIOD_SECONDS", 2),
                redelivery_timeout=env_seconds(env, "HORAE_REDELIVERY_TIMEOUT_SECONDS", 60),
                dispatch_lead=env_seconds(
                    env, "HORAE_DISPATCH_LEAD_SECONDS", 0, zero=True, most=MAX_DISPATCH_LEAD
                ),
                burst_lead=env_seconds(
                    env,
                    "HORAE_BURST_LEAD_SECONDS",
                    SchedulerSettings.burst_lead.total_seconds(),
                    zero=True,
                    most=MAX_DISPATCH_LEAD,
                ),
                burst_size=_int(env, "HORAE_BURST_SIZE", SchedulerSettings.burst_size),
                dispatch_interval=env_seconds(
                    env,
                    "HORAE_DISPATCH_INTERVAL_SECONDS",
                    SchedulerSettings.dispatch_interval.total_seconds(),
                    zero=True,
                    most=MAX_DISPATCH_INTERVAL,
                ),
                dead_webhook=_url(env, "HORAE_DEAD_WEBHOOK_URL"),
                identity=identity or sched_defaults.identity,
            ),
            metrics_port=_int(env, "HORAE_METRICS_PORT", 0, minimum=0),
            liveness_stall=env_seconds(env, "HORAE_LIVENESS_STALL_SECONDS", 30),
            operator=OperatorSettings(
                lease_duration=env_seconds(env, "HORAE_OPERATOR_LEASE_SECONDS", 15),
                resync_period=env_seconds(env, "HORAE_RESYNC_SECONDS", 60),
                scale_down_stabilization=env_seconds(
                    env, "HORAE_SCALE_DOWN_STABILIZATION_SECONDS", 300
                ),
                autoscale_period=env_seconds(env, "HORAE_AUTOSCALE_PERIOD_SECONDS", 5),
                scale_ahead=env_seconds(env, "HORAE_SCALE_AHEAD_SECONDS", 60, zero=True, most=600),
                identity=identity or OperatorSettings().identity,
                execution_mirror=_flag(env, "HORAE_EXECUTION_MIRROR"),
                status_interval=env_seconds(env, "HORAE_STATUS_INTERVAL_SECONDS", 10, zero=True),
            ),
            worker=WorkerSettings(
                pool=env.get("HORAE_POOL", worker_defaults.pool),
                pool_namespace=pool_namespace,
                tenants=_tenants(env, pool_namespace),
                concurrency=_int(env, "HORAE_CONCURRENCY", worker_defaults.concurrency),
                lease=env_seconds(env, "HORAE_EXECUTION_LEASE_SECONDS", 30),
                shutdown_grace=env_seconds(env, "HORAE_SHUTDOWN_GRACE_SECONDS", 25),
                broker_heartbeat=_int(env, "HORAE_BROKER_HEARTBEAT_SECONDS", 1, minimum=0),
                consumer_timeout=env_seconds(env, "HORAE_BROKER_CONSUMER_TIMEOUT_SECONDS", 1800),
                dead_webhook=_url(env, "HORAE_DEAD_WEBHOOK_URL"),
                identity=identity or worker_defaults.identity,
            ),
        )

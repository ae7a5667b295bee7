"""Prometheus metrics of every Horae process, defined once; `horae.probes` serves them
(the API: `horae.api.metering`).

Lags are seconds after the due moment: dispatch lag (publish - due) on the
scheduler, start lag (handler start - due) on the worker. The alerting rules shipped
with the chart (charts/horae/files/alerts.yaml) use these names; a test checks that
every name they use is defined here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)

dispatch_lag = Histogram(
    "horae_dispatch_lag_seconds",
    "Publish time minus the time to publish: the due time, less the dispatch lead for an "
    "execution published early.",
    buckets=LAG_BUCKETS,
)
start_lag = Histogram(
    "horae_start_lag_seconds", "Handler start minus due time.", buckets=LAG_BUCKETS
)
run_duration = Histogram("horae_run_duration_seconds", "Handler run time.")
owned_shards = Gauge("horae_owned_shards", "Shards this scheduler replica holds.")
lease_transitions = Counter(
    "horae_lease_transitions_total", "Shard Leases gained or lost.", ["change"]
)
fenced_writes = Counter("horae_fenced_writes_total", "Dispatch writes refused by fencing.")
preload_size = Gauge("horae_preload_size", "Executions held in the preload window.")
preload_peak = Gauge(
    "horae_preload_peak",
    "The most executions held in the preload window at once since start (at most "
    "HORAE_PRELOAD_MAX_ROWS).",
)
preload_read = Counter(
    "horae_preload_rows_read_total",
    "Rows the preload read, by why: `window` (the cursor and full re-reads), `notified` (a "
    "shard's NOTIFY behind the cursor), `gained` (a shard taken).",
    ["read"],
)
dispatched = Counter("horae_dispatched_total", "Executions published to the queue.")
group_dispatched = Counter(
    "horae_group_dispatched_total",
    "Executions published to the queue, by the store group that holds them.",
    ["group"],
)
dispatch_record = Histogram(
    "horae_dispatch_record_seconds",
    "How long one dispatch round's record (the fenced transaction recording its skips, "
    "replacements and next occurrences, committed before it publishes) took, by store group.",
    ["group"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
skipped = Counter("horae_skipped_total", "Occurrences skipped at dispatch.", ["reason"])
reaped = Counter("horae_reaped_total", "Executions recovered by the reaper.", ["kind"])
outcomes = Counter("horae_outcomes_total", "Execution outcomes recorded.", ["status"])
retries = Counter("horae_retries_total", "Retry executions scheduled.")
dead_letters = Counter("horae_dead_letters_total", "Executions dead-lettered.")
in_flight = Gauge("horae_in_flight", "Handlers running in this worker.")
claims_ahead_checked = Counter(
    "horae_claims_ahead_checked_total",
    "Executions claimed ahead, due, checked before their handlers start: covered by a "
    "promise already written at or after the due time, by one waited for, or read again "
    "in the store.",
    ["how"],
)
refused = Counter(
    "horae_refused_messages_total",
    "Dispatch messages a worker refused and dead-lettered, by reason (malformed, oversized, "
    "unprocessable, foreign-tenant).",
    ["reason"],
)
held_messages = Gauge(
    "horae_held_messages",
    "Dispatch messages waiting in <prefix>.held: executions of a tenant no pool serves.",
)
throttled = Counter("horae_tenant_throttled_total", "Claims deferred by a tenant limit.")
concurrency = Gauge(
    "horae_concurrency", "Handlers this worker runs at once at most (HORAE_CONCURRENCY)."
)
shards = Gauge(
    "horae_shards",
    "The installation's shard count (recorded by its first horae migrate), as a scheduler "
    "or the leading operator read it: what the schedulers' horae_owned_shards should add "
    "up to.",
)
held_back = Counter(
    "horae_tenant_held_back_total",
    "Executions kept back at dispatch, for a while, because their tenant ran its max_running.",
)

# The operator's own.
reconciles = Counter(
    "horae_operator_reconciles_total",
    "Runs of the operator's handlers of a resource (create, update, resume, delete), by kind "
    "(ScheduledJob, WorkerPool) and result: ok; refused (the resource cannot be acted on as "
    "it stands: an invalid spec, a quota, a refused pool; said in its status and Events); "
    "error (anything else, retried).",
    ["kind", "result"],
)
reconcile_duration = Histogram(
    "horae_operator_reconcile_seconds",
    "How long one run of the operator's handlers of a resource took, by kind.",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
operator_errors = Counter(
    "horae_operator_errors_total",
    "Failures of the operator's background parts (status-mirror, execution-mirrors, "
    "autoscaler, resync), each logged and retried.",
    ["part"],
)
scale_decisions = Counter(
    "horae_operator_scale_decisions_total",
    "WorkerPool Deployments scaled by the autoscaler, by direction (up, down).",
    ["direction"],
)
mirror_lag = Histogram(
    "horae_operator_mirror_lag_seconds",
    "From the operator's notification of a store change of a ScheduledJob's executions to "
    "its status and Execution mirrors written.",
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
)

# The API's own (served summed over its processes: horae.api.metering).
API_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
api_requests = Counter(
    "horae_api_requests_total",
    "HTTP requests the API answered, by route template (`/jobs/{job_id}`; `unmatched` for a "
    "path no route serves), method and status code.",
    ["route", "method", "status"],
)
api_latency = Histogram(
    "horae_api_request_seconds",
    "How long the API took to answer a request, by route template and method.",
    ["route", "method"],
    buckets=API_LATENCY_BUCKETS,
)

# The aggregated API's (horae aggregated-api: `kubectl get executions`).
aggregated_requests = Counter(
    "horae_aggregated_requests_total",
    "Requests for executions the aggregated API answered, by verb (get, list, watch, or "
    "write: refused) and status code.",
    ["verb", "code"],
)
aggregated_latency = Histogram(
    "horae_aggregated_request_seconds",
    "How long the aggregated API took to answer a get or list (a watch: until its stream "
    "began), by verb.",
    ["verb"],
    buckets=API_LATENCY_BUCKETS,
)
aggregated_watches = Gauge("horae_aggregated_watches", "Watches of executions streaming now.")
aggregated_watch_events = Counter(
    "horae_aggregated_watch_events_total", "Changes of executions sent to watches."
)

summed_store_connections = Gauge(
    "horae_store_connections",
    "Connections of the API's server processes to each store group, by state (in_use, idle, "
    "max), summed over the live processes.",
    ["group", "state"],
    multiprocess_mode="livesum",
    registry=None,  # multiprocess mode only: `StorePools` reports it otherwise
)


_owned: dict[str, int] = {}
_held: dict[str, tuple[int, int]] = {}


def report_owned(group: str, shards: int) -> None:
    """A scheduler's shards held in `group`: the gauge shows those of every group."""
    _owned[group] = shards
    owned_shards.set(sum(_owned.values()))


def report_preload(group: str, held: int, peak: int) -> None:
    """A group's dispatcher holds `held` executions, `peak` at most so far: the gauges show
    the replica's (the peak as the sum of the groups' peaks, an upper bound)."""
    _held[group] = (held, peak)
    preload_size.set(sum(h for h, _ in _held.values()))
    preload_peak.set(sum(p for _, p in _held.values()))


PoolUse = Callable[[], Iterable[tuple[str, int, int, int]]]
"""(store group, connections open, connections idle, pool maximum) of each group's pool."""


class StorePools(Collector):
    """`horae_store_connections{group, state}`: each store group's pool as this process holds
    it (in use, idle, and the most it may open), read at scrape time, so an operator sees
    which group a process waits on."""

    def __init__(self, use: PoolUse) -> None:
        self._use = use

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "horae_store_connections",
            "Connections of this process to each store group, by state (in_use, idle, max).",
            labels=["group", "state"],
        )
        for group, size, idle, most in self._use():
            family.add_metric([group, "in_use"], size - idle)
            family.add_metric([group, "idle"], idle)
            family.add_metric([group, "max"], most)
        yield family


def watch_store_pools(use: PoolUse) -> None:
    """Report the store groups' pools of this process (once per process)."""
    REGISTRY.register(StorePools(use))


def zero(counter: Counter, *values: str) -> None:
    """Create a counter's series for each label value at 0 when the process starts, so
    that its first event shows in rate() and increase() (which need a sample before it)."""
    for value in values:
        counter.labels(value)

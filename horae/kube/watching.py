"""`watch_leases`: a blocking stream of Lease changes, for a thread of its own."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kubernetes import client, watch

from horae.kube.calling import WATCH_SECONDS, WATCH_TIMEOUT
from horae.kube.leases import Lease, lease_from_json

log = logging.getLogger(__name__)


def watch_leases(
    api: client.ApiClient,
    namespace: str,
    selector: str,
    on_change: Callable[[str, Lease], None],
    stop: threading.Event,
) -> None:
    """Blocking: stream Lease changes to `on_change(event_type, lease)` until `stop` is set.

    Run it in a thread; it re-opens the watch when the server ends it, and after a
    failure waits 1 s, doubling up to 10 s, until an event arrives again.
    """
    coordination = client.CoordinationV1Api(api)
    backoff = 1.0
    while not stop.is_set():
        w = watch.Watch()
        try:
            for event in w.stream(
                coordination.list_namespaced_lease,
                namespace,
                label_selector=selector,
                timeout_seconds=WATCH_SECONDS,
                _request_timeout=WATCH_TIMEOUT,
                deserialize=False,
            ):
                on_change(event["type"], lease_from_json(event["object"]))
                backoff = 1.0
                if stop.is_set():
                    break
        except Exception as exc:
            if stop.is_set():
                break
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            log.warning(
                "lease watch (%s) failed, re-opening in %.0fs: %s", selector, backoff, reason
            )
            stop.wait(backoff)
            backoff = min(backoff * 2, 10.0)
        finally:
            w.stop()

"""Call an HTTP endpoint, and say which failures are worth retrying.

    horae worker --tasks worker/examples/http_check.py      # examples/http-check.yaml

Payload: `url` (required), `method` (default GET), `json` (a body to send, optional),
`timeout_seconds` (per request, default 10).

How the answer becomes an outcome:

| answer                                   | outcome                                        |
|------------------------------------------|------------------------------------------------|
| 2xx, 3xx (redirects followed)            | succeeded                                      |
| 429, 5xx                                 | `RetryableError`: retried with backoff; a      |
|                                          | `Retry-After` header sets the delay instead    |
| other 4xx                                | `PermanentError`: failed at once, no retry     |
| refused, reset, DNS failure, timeout     | `RetryableError`                               |
| a payload without `url`                  | `PermanentError`                               |

The worker's classifier (`horae/worker/outcome.py`) already treats an exception
carrying an HTTP status (`exc.response.status_code`, as httpx and requests raise, or
`exc.status`, as urllib's `HTTPError`) as retryable for 429/5xx and permanent
otherwise, and `ConnectionError`/`TimeoutError` as retryable. This handler raises
`RetryableError`/`PermanentError` itself so the decision is written where the reader
looks, honours `Retry-After`, and covers urllib's `URLError`, which the classifier
alone would take for permanent.

The handler is a plain function: urllib blocks, so the worker runs it in its thread
pool. It sends `ctx.idempotency_key` as the `Idempotency-Key` header, so a server
that supports it can tell a retry from a new request.
"""

from __future__ import annotations

import email.utils
import json
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

from horae import PermanentError, RetryableError, TaskContext, task

MAX_RETRY_AFTER = timedelta(hours=1)
"""A server asking for a longer pause than this gets the policy's backoff instead."""


def retry_after(value: str | None, *, now: datetime | None = None) -> timedelta | None:
    """A `Retry-After` header (seconds or an HTTP date) as a delay; None if absent or odd."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        delay = timedelta(seconds=int(value))
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        delay = when - (now or datetime.now(UTC))
    return delay if timedelta(0) <= delay <= MAX_RETRY_AFTER else None


def raise_for_status(status: int, reason: str, retry_after_header: str | None = None) -> None:
    """Turn an HTTP status into the handler's outcome: return on success, raise otherwise."""
    if status < 400:
        return
    if status == 429 or status >= 500:
        raise RetryableError(f"HTTP {status} {reason}", delay=retry_after(retry_after_header))
    raise PermanentError(f"HTTP {status} {reason}")


@task("examples.http-check", timeout=timedelta(seconds=60))
def http_check(ctx: TaskContext, payload: dict[str, Any]) -> None:
    url = payload.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise PermanentError("payload.url must be an http(s) URL")
    headers = {"User-Agent": "horae-example/1", "Idempotency-Key": ctx.idempotency_key}
    body = None
    if "json" in payload:
        body = json.dumps(payload["json"]).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(
        url, data=body, headers=headers, method=str(payload.get("method", "GET")).upper()
    )
    timeout = float(payload.get("timeout_seconds", 10))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status = response.status
    except urllib.error.HTTPError as exc:  # 4xx/5xx: the server answered
        raise_for_status(exc.code, str(exc.reason), exc.headers.get("Retry-After"))
        raise  # unreachable: raise_for_status raises for every status urllib raises for
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RetryableError(f"{url}: {reason}") from exc
    ctx.logger.info("HTTP %d from %s (attempt %d)", status, url, ctx.attempt)

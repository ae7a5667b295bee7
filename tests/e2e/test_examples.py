"""The handlers of worker/examples/ in real `horae worker` processes: the HTTP check
retries what a web service says is temporary and stops at what is not; the payment
handler charges once per occurrence however often it runs.

A stdlib HTTP server on loopback stands in for the third-party web service; Postgres,
RabbitMQ and the API server are the real ones.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from horae.models import JobSpec, RetryPolicy
from tests.e2e.test_worker import create, terminal
from tests.support.processes import Processes
from tests.support.store_rows import StoreRows
from tests.support.webhook import loopback_server

HTTP_CHECK = "worker/examples/http_check.py"
PAYMENT = "worker/examples/payment.py"
pytestmark = pytest.mark.usefixtures("shared_default_pool")
QUICK = RetryPolicy(max_attempts=3, initial_interval_seconds=0.2, max_interval_seconds=0.5)


@contextmanager
def web_service(
    answers: dict[str, list[tuple[int, dict[str, str]]]],
) -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    """(base URL, requests seen as (path, Idempotency-Key)). Each path answers its
    (status, headers) in turn, repeating the last one."""
    seen: list[tuple[str, str | None]] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with lock:
                seen.append((self.path, self.headers.get("Idempotency-Key")))
                script = answers.get(self.path, [(404, {})])
                status, headers = script.pop(0) if len(script) > 1 else script[0]
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    with loopback_server(Handler) as base:
        yield base, seen


async def test_http_check_retries_a_503_after_its_retry_after_and_fails_a_404_at_once(
    processes: Processes, stored: StoreRows
) -> None:
    answers = {"/flaky": [(503, {"Retry-After": "1"}), (200, {})], "/gone": [(404, {})]}
    with web_service(answers) as (base, seen):
        processes.start("scheduler", "scheduler")
        processes.start("worker", "worker", "--tasks", HTTP_CHECK)
        flaky = await create(stored, JobSpec(task="examples.http-check", run_at=datetime.now(UTC),
                                           retry=QUICK, payload={"url": f"{base}/flaky"}),
                             due_in=2)  # fmt: skip
        gone = await create(stored, JobSpec(task="examples.http-check", run_at=datetime.now(UTC),
                                          retry=QUICK, payload={"url": f"{base}/gone"}),
                            due_in=2)  # fmt: skip
        retried = await terminal(stored, flaky["id"], 2)
        [failed] = await terminal(stored, gone["id"], 1)

    assert [(r["attempt"], r["status"]) for r in retried] == [(1, "failed"), (2, "succeeded")]
    first, second = retried
    assert first["error_kind"] == "RetryableError" and "503" in first["error_message"]
    waited = (second["due_at"] - first["finished_at"]).total_seconds()
    assert 0.8 <= waited <= 1.5, f"Retry-After: 1 not honoured (policy cap 0.5 s): {waited}"
    assert (failed["status"], failed["error_kind"]) == ("failed", "PermanentError")
    assert "404" in failed["error_message"]
    assert [path for path, _ in seen].count("/gone") == 1, "a 404 is never retried"
    flaky_keys = [key for path, key in seen if path == "/flaky"]
    assert len(flaky_keys) == 2 and len(set(flaky_keys)) == 1, "one Idempotency-Key per occurrence"
    assert flaky_keys[0] is not None and flaky_keys[0].startswith(str(flaky["id"]))


async def test_a_payment_run_again_for_the_same_occurrence_charges_once(
    processes: Processes, stored: StoreRows, tmp_path: Path
) -> None:
    ledger = tmp_path / "payments.sqlite3"
    processes.start("scheduler", "scheduler")
    processes.start("worker", "worker", "--tasks", PAYMENT,
                    env={"HORAE_EXAMPLE_PAYMENTS_DB": str(ledger)})  # fmt: skip
    bill = {"customer": "cus_42", "amount_cents": 1990, "currency": "EUR"}
    # the provider charges on attempt 1 but its reply is lost: attempt 2 asks again
    lost = await create(stored, JobSpec(task="examples.charge", run_at=datetime.now(UTC),
                                      retry=QUICK, payload={**bill, "lose_reply_times": 1}),
                        due_in=2)  # fmt: skip
    plain = await create(stored, JobSpec(task="examples.charge", run_at=datetime.now(UTC),
                                       retry=QUICK, payload=bill), due_in=2)  # fmt: skip
    rows = await terminal(stored, lost["id"], 2)
    [other] = await terminal(stored, plain["id"], 1)

    assert [(r["attempt"], r["status"]) for r in rows] == [(1, "failed"), (2, "succeeded")]
    assert other["status"] == "succeeded"
    with closing(sqlite3.connect(ledger)) as db:
        requests = db.execute(
            "SELECT idempotency_key, replayed FROM requests ORDER BY id"
        ).fetchall()
        charges = dict(db.execute("SELECT idempotency_key, charge_id FROM charges").fetchall())
    retried = [(key, replayed) for key, replayed in requests if key.startswith(str(lost["id"]))]
    assert [replayed for _, replayed in retried] == [0, 1], "the second run was replayed"
    assert len({key for key, _ in retried}) == 1, "both attempts sent one idempotency key"
    assert len(charges) == 2, "one charge per occurrence: two jobs, three handler runs"
    assert {key.split(":")[0] for key in charges} == {str(lost["id"]), str(plain["id"])}

"""Charge a customer once per occurrence, however often the handler runs.

    horae worker --tasks worker/examples/payment.py      # examples/payment.yaml

Horae runs a handler at least once. The same occurrence can run again when the
charge went through but the reply was lost (a retry), when a worker died after
charging but before its outcome was recorded (the reaper retries once the lease
expires), or when a worker stopped past its grace period handed the execution back.
So the side effect itself must be idempotent.

`ctx.idempotency_key` is the job id plus the occurrence's fire time: the same for
every attempt of one occurrence, different for each occurrence. Pass it to your
payment provider's idempotency support (Stripe's and Adyen's `Idempotency-Key`
header, for instance): the provider keeps the first result under the key and
replays it for a repeated request, instead of charging again.

`LocalProvider` stands in for that provider so the example is self-contained: a
SQLite file (`HORAE_EXAMPLE_PAYMENTS_DB`, default `payments.sqlite3` in the working
directory) whose `charges` table is keyed by the idempotency key, and whose
`requests` table logs every call (as a provider's dashboard would). A real handler
replaces it with the provider's client and passes the key the same way.

Payload: `customer` (required), `amount_cents` (required, > 0), `currency` (default
EUR), and, for the demo and the tests only, `lose_reply_times`: on the first N
attempts the charge goes through but its reply is "lost", so the attempt fails with a
retryable error and the next attempt charges again with the same key.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from horae import PermanentError, RetryableError, TaskContext, task

SCHEMA = """
CREATE TABLE IF NOT EXISTS charges (
    idempotency_key TEXT PRIMARY KEY,
    charge_id TEXT NOT NULL,
    customer TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,
    currency TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key TEXT NOT NULL,
    replayed INTEGER NOT NULL,
    at TEXT NOT NULL
);
"""


class KeyReused(Exception):
    """The key was first used for a different charge (providers answer 4xx/409)."""


@dataclass(frozen=True)
class Charge:
    charge_id: str
    replayed: bool
    """True when the provider returned an earlier charge made under the same key."""


class LocalProvider:
    """A payment provider's idempotency, in SQLite: one charge per idempotency key."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        conn.executescript(SCHEMA)
        return conn

    def charge(self, *, key: str, customer: str, amount_cents: int, currency: str) -> Charge:
        now = datetime.now(UTC).isoformat()
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")  # one writer at a time: check and insert together
            found = conn.execute(
                "SELECT charge_id, customer, amount_cents, currency FROM charges"
                " WHERE idempotency_key = ?",
                (key,),
            ).fetchone()
            if found is not None and tuple(found[1:]) != (customer, amount_cents, currency):
                conn.execute("ROLLBACK")
                raise KeyReused(f"idempotency key {key} was used for another charge")
            if found is None:
                charge_id = f"ch_{uuid.uuid4().hex[:16]}"
                conn.execute(
                    "INSERT INTO charges VALUES (?, ?, ?, ?, ?, ?)",
                    (key, charge_id, customer, amount_cents, currency, now),
                )
            else:
                charge_id = found[0]
            conn.execute(
                "INSERT INTO requests (idempotency_key, replayed, at) VALUES (?, ?, ?)",
                (key, found is not None, now),
            )
            conn.execute("COMMIT")
            return Charge(charge_id, replayed=found is not None)
        finally:
            conn.close()


def provider() -> LocalProvider:
    return LocalProvider(os.environ.get("HORAE_EXAMPLE_PAYMENTS_DB", "payments.sqlite3"))


@task("examples.charge")
def charge(ctx: TaskContext, payload: dict[str, Any]) -> None:
    customer, amount = payload.get("customer"), payload.get("amount_cents")
    currency = str(payload.get("currency", "EUR"))
    if customer is None or not isinstance(amount, int) or amount <= 0:
        raise PermanentError("payload needs customer and a positive integer amount_cents")
    try:
        made = provider().charge(
            key=ctx.idempotency_key, customer=str(customer), amount_cents=amount,
            currency=currency,
        )  # fmt: skip
    except KeyReused as exc:
        raise PermanentError(str(exc)) from exc
    if ctx.attempt <= int(payload.get("lose_reply_times", 0)):
        raise RetryableError("the provider's reply was lost (simulated)")
    ctx.logger.info(
        "charge %s %s", made.charge_id, "replayed by the provider" if made.replayed else "made"
    )

"""Execution ids made at a chosen millisecond, as the store makes them (UUIDv7)."""

from __future__ import annotations

import uuid

from horae.store.scheduling import new_execution_id


def made_at(ms: int) -> uuid.UUID:
    """A fresh execution id made, by its first 12 hex digits, at `ms` ms since the epoch."""
    return uuid.UUID(int=new_execution_id().int & (2**80 - 1) | ms << 80)

"""Who held the job's shard when: the epoch in force at an instant, the one a row was
dispatched (or skipped) under, and a change of owner between a due time and a dispatch."""

from __future__ import annotations

from datetime import datetime

from horae.models import ExecutionStatus
from horae.store.explanation.facts import Epoch, Facts, Found, OwnerChange, when


def epochs(f: Facts, group: str) -> list[Epoch]:
    return sorted((e for e in f.epochs if e.group == group), key=lambda e: e.epoch)


def epoch_at(f: Facts, group: str, t: datetime) -> Epoch | None:
    held = [e for e in epochs(f, group) if e.taken_at is not None and e.taken_at <= t]
    return held[-1] if held else None


def epoch(f: Facts, group: str, number: int | None) -> Epoch | None:
    return next((e for e in epochs(f, group) if e.epoch == number), None)


def owned_by(e: Epoch | None) -> str:
    if e is None:
        return "which no scheduler has taken (none recorded)"
    return f"owned by {e.owner or '?'} (epoch {e.epoch}, since {when(e.taken_at)})"


def acted_under(f: Facts, found: Found) -> Epoch | None:
    """The epoch under which the scheduler acted on the row: its dispatch epoch; the one in
    force when it skipped it; or, for a row a worker claimed before the dispatch was
    recorded (which then leaves the row as the claim made it, without a dispatch epoch), the
    one in force at the claim: the claim came inside the publishing transaction, which holds
    the epoch (`dispatch.fenced`), so no other replica took the shard in between."""
    r = found.row
    if r.dispatch_epoch is not None:
        return epoch(f, found.group, r.dispatch_epoch)
    if r.status == ExecutionStatus.SKIPPED and r.finished_at is not None:
        return epoch_at(f, found.group, r.finished_at)
    if r.started_at is not None and r.enqueued_at is None:
        return epoch_at(f, found.group, r.started_at)
    return None


def owner_change(f: Facts, found: Found, due: datetime) -> OwnerChange | None:
    acting = acted_under(f, found)
    if acting is None or acting.taken_at is None or acting.taken_at <= due:
        return None
    before = epoch_at(f, found.group, due)
    return OwnerChange(
        shard=found.row.shard,
        at=acting.taken_at,
        from_owner=before.owner if before else None,
        from_epoch=before.epoch if before else None,
        to_owner=acting.owner,
        to_epoch=acting.epoch,
    )


def change_text(c: OwnerChange) -> str:
    if c.from_owner is None:
        return f"shard {c.shard} was taken at {when(c.at)} by {c.to_owner or '?'}"
    if c.from_owner == c.to_owner:
        return f"shard {c.shard} was taken again at {when(c.at)} by {c.to_owner}"
    return f"shard {c.shard} changed owner at {when(c.at)} (replica {c.from_owner} → {c.to_owner})"

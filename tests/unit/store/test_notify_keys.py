"""Execution ids sort by creation time; shard NOTIFY payloads carry the earliest new due time."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

from horae.store.dispatch import Notice, parse_notify
from horae.store.scheduling import new_execution_id


def test_execution_ids_are_uuidv7_and_later_ones_sort_after_earlier_ones() -> None:
    first = [new_execution_id() for _ in range(100)]
    time.sleep(0.002)
    later = [new_execution_id() for _ in range(100)]
    assert {u.version for u in first + later} == {7}
    assert {u.variant for u in first + later} == {uuid.RFC_4122}
    assert max(first) < min(later)
    assert len(set(first + later)) == 200
    # the leading 48 bits are the creation time in milliseconds
    assert abs((first[0].int >> 80) - time.time() * 1000) < 5_000


def test_a_notify_payload_is_a_key_and_anything_else_means_reread() -> None:
    ident = uuid.uuid4()
    at = datetime(2026, 11, 30, 9, 0, 0, 123456, tzinfo=UTC)
    micros = int((at - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) * 1_000_000 + 123456
    assert parse_notify(str(micros)) is None
    assert parse_notify(f"{micros} {ident}") == Notice((at, ident))  # as earlier releases sent
    assert parse_notify("throttled") is None
    assert parse_notify("released") is None
    assert parse_notify(str(ident)) is None  # the payload of an older release
    assert parse_notify("12 not-a-uuid") is None


def test_a_key_from_an_ids_millisecond_sorts_ahead_of_rows_read_before_it_was_made() -> None:
    """The payload carries the smallest new id's creation millisecond, not the id (any role
    may LISTEN): the key is at or just before the new row, and after every row of the same
    instant made in an earlier millisecond, so a burst created for an instant the
    scheduler's cursor has reached does not make it re-read that instant."""
    at = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    micros = 1_796_029_200_000_000
    read = new_execution_id()  # a row the scheduler has already read (its cursor)
    time.sleep(0.002)
    new = new_execution_id()
    notice = parse_notify(f"{micros} {new.int >> 80}")
    assert notice == Notice((at, uuid.UUID(int=(new.int >> 80) << 80)))
    _, floor = notice.key
    assert read < floor <= new


def test_a_notice_of_when_the_new_ids_were_made_bounds_them_all_when_merged() -> None:
    """This release's inserts add the smallest creation millisecond of all the new ids (the
    smallest key's id need not be the first made): a re-read behind the cursor skips rows
    made before it. Merged notices keep the smaller key and the earlier millisecond; one
    that does not tell it (a retry's, from `horae_finish`) tells it for neither."""
    at = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    micros = 1_796_029_200_000_000
    first = new_execution_id()
    time.sleep(0.002)
    keyed = new_execution_id()  # the smallest (due_at, id) of the insert, made later
    one = parse_notify(f"{micros} {keyed.int >> 80} {first.int >> 80}")
    assert one is not None and one.made is not None and one.key[0] == at
    assert one.made <= first < one.key[1] <= keyed
    later = parse_notify(f"{micros + 1} {keyed.int >> 80} {keyed.int >> 80}")
    assert later is not None
    assert later.merged(one) == one.merged(later) == Notice(one.key, one.made)
    told_not = parse_notify(f"{micros - 1} {keyed.int >> 80}")
    assert told_not is not None and told_not.made is None
    assert one.merged(told_not) == Notice(told_not.key, None)
    assert parse_notify(f"{micros} {keyed.int >> 80} x") == Notice(one.key)

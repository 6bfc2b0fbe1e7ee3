"""Tombstones stay until gc_grace_seconds after their local deletion time, then go as compaction drops them."""

from __future__ import annotations

import random

import pytest

from testkit.event_builder import NOW, DeleteRange, DeleteRow, EventBuilder, Write
from tests.unit.state.random_history import SCHEMA as PROP_SCHEMA
from tests.unit.state.random_history import random_history
from tests.unit.state.support import decoded_rows, merged, table

SCHEMA = table("gc")  # gc_grace_seconds = 100
BUILDER = EventBuilder(SCHEMA)


def test_a_row_tombstone_is_kept_until_gc_grace_has_passed() -> None:
    state = merged([BUILDER.event(DeleteRow(1, (1,), ts=20), now=NOW)], SCHEMA)
    late_old_write = BUILDER.event(Write(1, (1,), {"v": 1}, ts=15, insert=True))
    assert state.purge(NOW + 100, SCHEMA.gc_grace_seconds) == 0
    state.apply(late_old_write, SCHEMA)
    assert decoded_rows(state, SCHEMA, NOW + 100) == []  # the kept tombstone still shadows it
    assert state.purge(NOW + 101, SCHEMA.gc_grace_seconds) == 1
    assert state.is_empty()
    # after gc grace Cassandra would resurrect such a late write too: the tombstone is gone
    state.apply(late_old_write, SCHEMA)
    assert decoded_rows(state, SCHEMA, NOW + 101) == [{"pk": 1, "ck": 1, "v": 1}]


def test_expired_cells_and_range_tombstones_are_purged_after_gc_grace() -> None:
    state = merged(
        [
            BUILDER.event(Write(1, (1,), {"v": 1}, ts=10, ttl=10, insert=True), now=NOW),
            BUILDER.event(DeleteRange(1, low=5, ts=11), now=NOW + 5),
        ],
        SCHEMA,
    )
    assert state.purge(NOW + 105, 100) == 0  # range deletion at NOW+5: gc_before is NOW+5
    assert state.purge(NOW + 110, 100) == 1  # the range tombstone
    assert state.purge(NOW + 110, 100) == 0  # the cell and marker expired at NOW+10: kept at gc_before NOW+10
    assert state.purge(NOW + 111, 100) == 2
    assert state.is_empty()


@pytest.mark.parametrize("seed", range(40))
def test_purge_never_changes_what_is_visible(seed: int) -> None:
    events = random_history(seed)
    state = merged(events, PROP_SCHEMA)
    rng = random.Random(seed)
    for now in sorted(NOW + rng.randint(0, 200) for _ in range(3)):
        before = decoded_rows(state, PROP_SCHEMA, now)
        state.purge(now, rng.choice([0, 5, 50]))
        assert decoded_rows(state, PROP_SCHEMA, now) == before

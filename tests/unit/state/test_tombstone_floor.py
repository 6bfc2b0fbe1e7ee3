"""A store's tombstone floor: tombstones and expired cells stay max(gc_grace_seconds, floor) seconds.

Row, partition and range deletions and expired cells are all due (and purged) at their local deletion
time plus that grace, and not a second earlier; a floor below the table's gc_grace_seconds changes
nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from state.store.partition_store import PartitionStore, StoreOptions
from testkit.event_builder import NOW, DeletePartition, DeleteRange, DeleteRow, EventBuilder, Write
from tests.unit.state.support import table
from tests.unit.state.test_partition_store import StoreWorker

GC0 = dataclasses.replace(table("gc"), gc_grace_seconds=0)
FLOOR = 500


@pytest.fixture
def store(tmp_path: Path) -> Iterator[PartitionStore]:
    with PartitionStore(tmp_path / "p0", 0, StoreOptions(tombstone_floor_s=FLOOR)) as opened:
        yield opened


def due_seconds(store: PartitionStore) -> list[tuple[bool, int]]:
    """(is the header, second) of every due entry."""
    with store.transaction() as txn:
        return [(e.clustering_key is None, e.at_s) for e in txn.due_expiries(NOW + 10 * FLOOR, 100)]


def test_every_kind_of_tombstone_waits_for_the_floor_on_a_table_with_gc_grace_zero(
    store: PartitionStore,
) -> None:
    builder = EventBuilder(GC0)
    worker = StoreWorker(store, GC0)
    worker.batch(
        [
            builder.event(Write(1, (1,), {"v": 1}, ts=10, insert=True)),
            builder.event(DeleteRow(1, (1,), ts=20), now=NOW),
            builder.event(Write(2, (1,), {"v": 1}, ts=10, insert=True)),
            builder.event(DeleteRange(2, low=0, high=5, ts=20), now=NOW + 1),
            builder.event(Write(3, (1,), {"v": 1}, ts=10, insert=True)),
            builder.event(DeletePartition(3, ts=20), now=NOW + 2),
            builder.event(Write(4, (1,), {"v": 1}, ts=30, ttl=3), now=NOW),
        ],
        NOW + 2,
    )
    assert sorted(due_seconds(store)) == [
        (False, NOW + 3),  # the TTL runs out: an expiry, not a purge
        (False, NOW + FLOOR + 1),  # the row deletion
        (True, NOW + 1 + FLOOR + 1),  # the range deletion (the header)
        (True, NOW + 2 + FLOOR + 1),  # the partition deletion
    ]
    worker.batch([], NOW + 3)
    assert (False, NOW + 3 + FLOOR + 1) in due_seconds(store), "the expired cell waits for the floor too"
    worker.batch([], NOW + FLOOR)
    assert len(due_seconds(store)) == 4, "nothing is purged before the floor has passed"
    worker.batch([], NOW + 3 + FLOOR + 1)
    assert due_seconds(store) == [] and store.count_rows() == 0


def test_a_floor_below_gc_grace_seconds_leaves_the_tables_own(store: PartitionStore) -> None:
    schema = table("gc")  # gc_grace_seconds = 100
    assert StoreOptions(tombstone_floor_s=50).gc_grace_seconds(schema) == 100
    assert StoreOptions(tombstone_floor_s=FLOOR).gc_grace_seconds(schema) == FLOOR
    builder = EventBuilder(schema)
    with PartitionStore(store.path.parent / "p1", 1, StoreOptions(tombstone_floor_s=50)) as low:
        worker = StoreWorker(low, schema)
        worker.batch([builder.event(DeleteRow(1, (1,), ts=20), now=NOW)], NOW)
        assert due_seconds(low) == [(False, NOW + 101)]

"""Savepoints of a StateTransaction on real rocksdict: an event taken out after (part of) its merge leaves
the transaction exactly as if it had never been merged.

The worker sets a savepoint before each raw event and goes back to it when the event's merge fails half-way
(app/batch_loop.py). Here random histories run twice: once with some events merged and then undone (after
their first chunk of changes, or after all of them), once without those events at all. Changes, changelog
and the stored state must be the same.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from cassandra_model.table_schema import TableSchema
from state.change import RowChange
from state.errors import StoreError
from state.partition_state import prepare_event
from state.store.merge import merge_event
from state.store.partition_store import PartitionStore, StoreOptions
from state.table_layout import layout_for
from testkit.event_builder import NOW, EventBuilder, Write
from tests.unit.state.random_history import SCHEMA as PROP
from tests.unit.state.support import table
from tests.unit.state.test_partition_store import StoreWorker, nonempty, random_batches

Batches = list[list[dict[str, Any]]]


def run(
    path: Path, schema: TableSchema, batches: Batches, undone: dict[tuple[int, int], int | None]
) -> tuple[list[tuple[bytes, list[RowChange]]], list[tuple[bytes, bytes | None]], list[tuple[bytes, bytes]]]:
    """Every batch in one transaction, a savepoint before each event; an event in ``undone`` is merged
    for that many chunks of changes (None: all), then rolled back to its savepoint. The changes kept, the
    changelog, and the store's content at the end."""
    changes: list[tuple[bytes, list[RowChange]]] = []
    changelog: list[tuple[bytes, bytes | None]] = []
    layout = layout_for(schema)
    with PartitionStore(path, 0, StoreOptions(block_cache_bytes=1 << 20)) as store:
        worker = StoreWorker(store, schema)
        for b, events in enumerate(batches):
            now = NOW + b
            with store.transaction() as txn:
                changes.extend(worker.expire(txn, now))
                for e, event in enumerate(events):
                    txn.savepoint()
                    prepared = prepare_event(event, layout)
                    merge = merge_event(txn, schema, prepared, now)
                    chunks: list[RowChange] = []
                    limit = undone.get((b, e), -1)
                    for chunk in merge:
                        chunks.extend(chunk)
                        if limit is not None and limit >= 0 and len(chunks) >= limit:
                            break  # the merge fails here, half-way
                    if (b, e) in undone:
                        txn.rollback_to_savepoint()
                    else:
                        changes.append((prepared.partition_key, chunks))
                changelog.extend(txn.changelog())
                txn.commit(b, len(changelog))
        return changes, changelog, list(store.items())


@pytest.mark.parametrize("seed", range(25))
def test_events_undone_to_their_savepoint_leave_what_a_run_without_them_leaves(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    batches = random_batches(seed, PROP)
    undone: dict[tuple[int, int], int | None] = {}
    for b, events in enumerate(batches):
        for e in range(len(events)):
            if rng.random() < 0.3:
                undone[(b, e)] = rng.choice([None, 0, 1])
    without = [
        [ev for e, ev in enumerate(events) if (b, e) not in undone] for b, events in enumerate(batches)
    ]

    got = run(tmp_path / "undone", PROP, batches, undone)
    expected = run(tmp_path / "without", PROP, without, {})

    assert nonempty(got[0]) == nonempty(expected[0])
    assert got[1] == expected[1], "the changelog differs"
    assert got[2] == expected[2], "the stored state differs"


def test_an_undone_event_is_forgotten_by_reads_scans_and_the_digest_memo(tmp_path: Path) -> None:
    schema = table("kv")
    builder = EventBuilder(schema)
    layout = layout_for(schema)
    kept = builder.event(Write(1, (1,), {"v": 1}, ts=10, insert=True))
    undone = builder.event(Write(1, (2,), {"v": 2}, ts=11, ttl=5, insert=True))
    with PartitionStore(tmp_path / "p", 0) as store, store.transaction() as txn:
        txn.savepoint()
        list(merge_event(txn, schema, prepare_event(kept, layout), NOW))
        txn.remember_digest(kept["digest"], 1)
        written = txn.changelog()

        txn.savepoint()
        txn.remember_digest(undone["digest"], 2)
        list(merge_event(txn, schema, prepare_event(undone, layout), NOW))
        assert txn.seen_digest(undone["digest"]) and txn.due_expiries(NOW + 5, 10)
        txn.rollback_to_savepoint()

        assert txn.changelog() == written
        assert not txn.seen_digest(undone["digest"]) and txn.seen_digest(kept["digest"])
        assert txn.due_expiries(NOW + 5, 10) == []
        rows = list(txn.rows(schema, builder.partition_key(1), None))
        assert [ck for ck, _, _ in rows] == [layout.clustering.key(builder.clustering([1]))]


def test_a_rollback_without_a_savepoint_is_refused_with_the_partition_named(tmp_path: Path) -> None:
    with (
        PartitionStore(tmp_path / "p", 4) as store,
        store.transaction() as txn,
        pytest.raises(StoreError, match="partition 4 has no savepoint"),
    ):
        txn.rollback_to_savepoint()

"""The RocksDB partition store against real rocksdict: sparse loads give the in-memory merge's results,
transactions isolate a batch, the changelog rebuilds the DB, the due index and the digest horizon hold.

``StoreWorker`` below does with a store what the Faust worker does, reduced to the state calls; the
property tests run it beside ``MemoryWorker`` (the merge core on whole in-memory partitions) over
random histories and compare every change event and the final states.
"""

from __future__ import annotations

import dataclasses
import random
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from cassandra_model.table_schema import TableSchema
from state.cell_merge import NO_DELETION_TIME, Cell, Liveness
from state.change import RowChange, apply_with_changes, expiry_changes
from state.errors import StoreError
from state.partition_state import PartitionState, prepare_event
from state.range_tombstones import RangeTombstoneList
from state.row_state import RowState
from state.store.codec import stored_due
from state.store.keys import digest_age_key, due_key, meta_key, pack_u64, parse_row_key
from state.store.merge import CHUNK_ROWS, expire_partition, merge_event
from state.store.partition_store import PartitionStore, StoreOptions
from state.store.recent_digests import RecentDigests
from state.store.transaction import DueExpiry, StateTransaction
from state.table_layout import clustering_key, layout_for
from testkit.event_builder import (
    NOW,
    DeletePartition,
    DeleteRange,
    DeleteRow,
    EventBuilder,
    Write,
)
from tests.unit.state.random_history import SCHEMA as PROP
from tests.unit.state.random_history import random_op
from tests.unit.state.support import table

WATERMARK = "expiry_watermark"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[PartitionStore]:
    with PartitionStore(tmp_path / "p3", 3, StoreOptions(block_cache_bytes=4 << 20)) as opened:
        yield opened


def header_needed(result: Any) -> bool:
    return bool(result.static or result.partition_deletion or result.range_tombstones)


class StoreWorker:
    """One partition's worker on a store: per batch, the due rows first (expiry, purge), then the
    events, then one commit (``state.store.merge``, as the worker runs it); every transaction's changelog is
    kept as the changelog topic would."""

    def __init__(self, store: PartitionStore, schema: TableSchema, *, due_limit: int = 100_000) -> None:
        self.store = store
        self.schema = schema
        self.due_limit = due_limit
        self.layout = layout_for(schema)
        self.changelog: list[tuple[bytes, bytes | None]] = []
        self.offset = 0

    def batch(
        self, events: Sequence[dict[str, Any]], now_s: int, *, rollback: bool = False
    ) -> list[tuple[bytes, list[RowChange]]]:
        with self.store.transaction() as txn:
            out = self.expire(txn, now_s)
            for event in events:
                prepared = prepare_event(event, self.layout)
                changes = [c for chunk in merge_event(txn, self.schema, prepared, now_s) for c in chunk]
                out.append((prepared.partition_key, changes))
            if rollback:
                txn.rollback()
                return out
            records = txn.changelog()
            self.changelog.extend(records)
            self.offset += len(records)
            txn.commit(self.offset, self.offset)
        return out

    def expire(self, txn: StateTransaction, now_s: int) -> list[tuple[bytes, list[RowChange]]]:
        due: dict[bytes, list[DueExpiry]] = defaultdict(list)
        for entry in txn.due_expiries(now_s, self.due_limit):
            assert entry.table_id == self.schema.table_id and entry.at_s <= now_s
            due[entry.partition_key].append(entry)
        out = []
        for partition_key, entries in sorted(due.items()):
            chunks = expire_partition(txn, self.schema, partition_key, entries, now_s)
            out.append((partition_key, [c for _, chunk in chunks for c in chunk]))
        return out


class MemoryWorker:
    """The same batches on whole in-memory partitions, purged everywhere at every step."""

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self.states: dict[bytes, PartitionState] = {}
        self.since = NOW

    def batch(self, events: Sequence[dict[str, Any]], now_s: int) -> list[tuple[bytes, list[RowChange]]]:
        gc = self.schema.gc_grace_seconds
        out = []
        for partition_key, state in sorted(self.states.items()):
            changes = expiry_changes(state, self.schema, self.since, now_s)
            if changes:
                out.append((partition_key, changes))
            state.purge(now_s, gc)
        self.since = now_s
        for event in events:
            key = event["partition_key"]
            state = self.states.setdefault(key, PartitionState(key))
            _, changes = apply_with_changes(state, event, self.schema, now_s)
            state.purge(now_s, gc)
            out.append((key, changes))
        return out


def random_batches(seed: int, schema: TableSchema) -> list[list[dict[str, Any]]]:
    """Random operations of ``random_history`` spread over three partitions, in batches of 1-5."""
    rng = random.Random(seed)
    builder = EventBuilder(schema)
    events = [
        builder.event(
            dataclasses.replace(random_op(rng), key=rng.choice([1, 2, 3])), now=NOW + rng.randint(0, 10)
        )
        for _ in range(rng.randint(5, 40))
    ]
    batches = []
    while events:
        size = rng.randint(1, 5)
        batches.append(events[:size])
        events = events[size:]
    return batches


def nonempty(changes: list[tuple[bytes, list[RowChange]]]) -> list[tuple[bytes, list[RowChange]]]:
    """The non-empty change lists, each in clustering order with the static-only row first (the store
    reports that row last when it sweeps; the order across keys of one update carries no meaning)."""
    return [
        (k, sorted(c, key=lambda change: (change.key is not None, change.key or b"")))
        for k, c in changes
        if c
    ]


def assert_same_partitions(store: PartitionStore, memory: MemoryWorker) -> None:
    for partition_key, state in memory.states.items():
        assert store.read_partition(memory.schema.table_id, partition_key) == state


def assert_due_index_matches_the_values(store: PartitionStore) -> None:
    """One X entry per row or header that carries a due second, and no other X entry."""
    expected = set()
    for key, value in store.items():
        due = stored_due(value) if key[:1] in (b"P", b"R") else None
        if due is not None:
            table_id, partition_key, clustering = (
                parse_row_key(key) if key[:1] == b"R" else (*parse_row_key(b"R" + key[1:])[:2], None)
            )
            expected.add(due_key(due, table_id.bytes, partition_key, clustering))
    assert {k for k, _ in store.items() if k[:1] == b"X"} == expected


def replay_history(worker: StoreWorker, memory: MemoryWorker, seed: int) -> int:
    """Random batches through both workers (some aborted once first), comparing every change; the
    time of the last batch."""
    rng = random.Random(seed)
    now = NOW
    for i, events in enumerate(random_batches(seed, worker.schema)):
        now += rng.randint(0, 4)
        if rng.random() < 0.2:
            worker.batch(events, now, rollback=True)  # an aborted batch, consumed again
        got = worker.batch(events, now)
        assert nonempty(got) == nonempty(memory.batch(events, now)), f"batch {i} at NOW+{now - NOW}"
    return now


@pytest.mark.parametrize("gc_grace", [864000, 3])
@pytest.mark.parametrize("seed", range(40))
def test_sparse_loads_give_the_changes_and_states_of_the_in_memory_merge(
    tmp_path: Path, seed: int, gc_grace: int
) -> None:
    """Writes, TTLs, collections, statics, row/range/partition deletions; with a short gc_grace the due
    index must also purge exactly what a purge of the whole partition would, at the same times."""
    schema = dataclasses.replace(PROP, gc_grace_seconds=gc_grace)
    with PartitionStore(tmp_path / "p0", 0) as store:
        memory = MemoryWorker(schema)
        now = replay_history(StoreWorker(store, schema), memory, seed)
        worker = StoreWorker(store, schema)
        assert_same_partitions(store, memory)
        for later in (now + 30, now + 10_000_000):  # everything expires, then everything is purged
            assert nonempty(worker.batch([], later)) == nonempty(memory.batch([], later))
            assert_same_partitions(store, memory)
        assert_due_index_matches_the_values(store)


@pytest.mark.parametrize("seed", range(20))
def test_deletions_purged_one_row_per_transaction_bring_nothing_back(tmp_path: Path, seed: int) -> None:
    """The rows a partition or range deletion covers keep what it deletes until it is purged; with room
    to rewrite one row per transaction, the purge takes a transaction per row, a second apart, and
    leaves exactly the rows and values of the in-memory merge."""
    with PartitionStore(tmp_path / "p0", 0, StoreOptions(shadow_rows_per_transaction=1)) as store:
        memory = MemoryWorker(PROP)
        worker = StoreWorker(store, PROP)
        later = replay_history(worker, memory, seed) + 10_000_000
        assert nonempty(worker.batch([], later)) == nonempty(memory.batch([], later))
        passes = 0
        while True:
            with store.transaction() as txn:
                if not txn.due_expiries(later + passes, 1):
                    break
            passes += 1
            assert nonempty(worker.batch([], later + passes)) == [], "a purge pass emitted a change"
            assert passes < 500
        assert_same_partitions(store, memory)
        assert store.count_rows() == sum(len(state.rows) for state in memory.states.values())
        assert_due_index_matches_the_values(store)


def test_applying_a_copy_again_reads_little_and_writes_nothing(store: PartitionStore) -> None:
    schema = table("kv")
    builder = EventBuilder(schema)
    event = builder.event(Write(1, (5,), {"v": 1, "l": [1, 2], "s": 3}, ts=10, ttl=100, insert=True))
    worker = StoreWorker(store, schema)
    worker.batch([event], NOW)
    with store.transaction() as txn:
        state = txn.load(schema, prepare_event(event, worker.layout), NOW)
        result, changes = apply_with_changes(state, event, schema, NOW)
        txn.save(schema, state, [clustering_key(schema, builder.clustering([5]))], NOW, header=True)
        assert not result.changed and changes == []
        assert txn.writes == 0 and txn.changelog() == []


# ---------------------------------------------------------------------------------------------------------
# wide partitions


def fill_rows(store: PartitionStore, schema: TableSchema, count: int, *, ts: int = 10) -> list[bytes]:
    """``count`` rows ``ck = 0..count-1`` of partition 1 with one int cell, written straight by save."""
    builder = EventBuilder(schema)
    state = PartitionState(builder.partition_key(1))
    keys = []
    for ck in range(count):
        clustering = tuple(builder.clustering([ck]))
        key = clustering_key(schema, clustering)
        state.rows[key] = RowState(
            clustering, Liveness(ts), cells={"v": Cell(ts, 0, NO_DELETION_TIME, 0, ck.to_bytes(4, "big"))}
        )
        keys.append(key)
    with store.transaction() as txn:
        txn.save(schema, state, keys, NOW, header=False)
        txn.commit(None, 0)
    return keys


def merged(txn: StateTransaction, schema: TableSchema, event: dict[str, Any], now_s: int) -> list[RowChange]:
    changes = merge_event(txn, schema, prepare_event(event, layout_for(schema)), now_s)
    return [change for chunk in changes for change in chunk]


def test_a_range_delete_in_a_wide_partition_reads_only_the_rows_it_covers(store: PartitionStore) -> None:
    """It writes the header alone; the rows it covers are rewritten only when it is purged."""
    schema = table("gc")  # gc_grace_seconds = 100
    fill_rows(store, schema, 100_000)
    builder = EventBuilder(schema)
    with store.transaction() as txn:
        changes = merged(txn, schema, builder.event(DeleteRange(1, low=40_000, high=40_099, ts=20)), NOW)
        assert [c.op for c in changes] == ["d"] * 100
        # the header as the sweep's before side, the rows (the load read no header: the table has none)
        assert txn.reads == 1 + 100
        assert txn.writes == 2  # the header and its due entry (its purge)
        txn.commit(None, 1)
    covered = clustering_key(schema, builder.clustering([40_050]))
    assert store.read_row(schema.table_id, builder.partition_key(1), covered).rows == {}
    assert store.count_rows() == 100_000
    worker = StoreWorker(store, schema)
    assert nonempty(worker.batch([], NOW + 101)) == []  # past gc_grace: the range deletion is purged
    assert store.count_rows() == 100_000 - 100
    assert (
        store.read_partition(schema.table_id, builder.partition_key(1)).range_tombstones
        == RangeTombstoneList()
    )
    with store.transaction() as txn:
        point = builder.event(Write(1, (70_000,), {"v": 1}, ts=30))
        state = txn.load(schema, prepare_event(point, layout_for(schema)), NOW)
        assert len(state.rows) == 1 and txn.reads == 2


def test_a_load_reads_the_header_only_of_a_table_that_has_headers(tmp_path: Path) -> None:
    """A header is read when the table has one in RocksDB (written by a commit or a restore, or found
    when the store opens) or in the transaction; a load of any other table skips that read."""
    schema, other = table("gc"), table("desc1")
    builder = EventBuilder(schema)
    write = prepare_event(builder.event(Write(1, (5,), {"v": 1}, ts=30)), layout_for(schema))
    with PartitionStore(tmp_path / "p", 1) as store:
        assert store.header_tables == set()
        with store.transaction() as txn:
            assert txn.load(schema, write, NOW).partition_deletion is None and txn.reads == 1  # the row
            merged(txn, schema, builder.event(DeletePartition(1, ts=20)), NOW)
            reads = txn.reads
            state = txn.load(schema, write, NOW)  # the header of this transaction
            assert state.partition_deletion is not None and txn.reads == reads + 1
            log = txn.changelog()
            txn.commit(None, len(log))
        assert store.header_tables == {schema.table_id.bytes}
        with store.transaction() as txn:
            assert txn.load(schema, write, NOW).partition_deletion is not None and txn.reads == 2
    with PartitionStore(tmp_path / "p", 1) as store, PartitionStore(tmp_path / "copy", 1) as copy:
        assert store.header_tables == {schema.table_id.bytes}, "found when the store opens"
        copy.restore(iter(log), len(log))
        assert copy.header_tables == {schema.table_id.bytes}, "written by a restore"
        other_write = prepare_event(
            EventBuilder(other).event(Write(1, (5,), {"v": 1}, ts=30)), layout_for(other)
        )
        with copy.transaction() as txn:
            assert txn.load(schema, write, NOW).partition_deletion is not None
            reads = txn.reads
            txn.load(other, other_write, NOW)
            assert txn.reads == reads + 1, "the other table's row alone"


def test_a_partition_deletion_streams_the_changes_of_a_wide_partition_and_writes_only_its_header(
    tmp_path: Path,
) -> None:
    schema = table("gc")
    builder = EventBuilder(schema)
    with PartitionStore(tmp_path / "p1", 1, StoreOptions(shadow_rows_per_transaction=5_000)) as store:
        fill_rows(store, schema, 20_000)
        event = builder.event(DeletePartition(1, ts=20))
        with store.transaction() as txn:
            sizes = []
            for chunk in merge_event(txn, schema, prepare_event(event, layout_for(schema)), NOW):
                assert txn.writes == 0  # nothing held back for the commit while the rows stream
                assert {c.op for c in chunk} == {"d"}
                sizes.append(len(chunk))
            assert sum(sizes) == 20_000 and max(sizes) <= CHUNK_ROWS
            assert txn.writes == 2  # the header and its due entry
            txn.commit(None, 1)
        assert store.count_rows() == 20_000
        worker = StoreWorker(store, schema)
        ((_, (change,)),) = worker.batch([builder.event(Write(1, (5,), {"v": 9}, ts=30))], NOW + 1)
        assert change.op == "c" and change.before is None
        # past gc_grace the 19,999 rows it deleted go, 5,000 per transaction, a second apart; then it goes
        passes = 0
        while store.read_partition(schema.table_id, builder.partition_key(1)).partition_deletion is not None:
            assert nonempty(worker.batch([], NOW + 101 + passes)) == []
            passes += 1
            assert store.count_rows() == max(1, 20_000 - 5_000 * passes)
        assert passes == 4
        assert store.count_rows() == 1
        assert_due_index_matches_the_values(store)
        state = store.read_partition(schema.table_id, builder.partition_key(1))
        assert [row.cells["v"].value for row in state.rows.values()] == [(9).to_bytes(4, "big")]


def test_a_row_write_under_live_static_cells_reads_one_witness_row(store: PartitionStore) -> None:
    """The static-only row shows when no row exists: a write needs one other existing row, not all."""
    schema = table("kv")
    builder = EventBuilder(schema)
    fill_rows(store, schema, 2_000)
    with store.transaction() as txn:  # a static update changes every row's image: all are read
        changes = merged(txn, schema, builder.event(Write(1, (), {"s": 7}, ts=20)), NOW)
        assert [c.op for c in changes] == ["u"] * 2_000 and txn.writes == 1  # the header
        txn.commit(None, 1)
    worker = StoreWorker(store, schema)
    for ck in (0, 5, 3_000):
        event = builder.event(Write(1, (ck,), {"w": "x"}, ts=30))
        with store.transaction() as txn:
            state = txn.load(schema, prepare_event(event, worker.layout), NOW)
            assert len(state.rows) == (1 if ck == 3_000 else 2) and txn.reads <= 4
    # deleting the first rows: the witness is the first row that still exists
    worker.batch([builder.event(DeleteRange(1, low=0, high=9, ts=40))], NOW)
    with store.transaction() as txn:
        event = builder.event(Write(1, (500,), {"w": "y"}, ts=50))
        state = txn.load(schema, prepare_event(event, worker.layout), NOW)
        assert sorted(state.rows) == sorted(
            clustering_key(schema, builder.clustering([c])) for c in (10, 500)
        )
        txn.rollback()
    with store.transaction() as txn:  # nor inside the range an update deletes
        event = builder.event(DeleteRange(1, low=10, high=19, ts=45))
        state = txn.load(schema, prepare_event(event, worker.layout), NOW)
        assert sorted(state.rows) == [clustering_key(schema, builder.clustering([20]))]
        txn.rollback()
    with store.transaction() as txn:
        changes = merged(txn, schema, builder.event(DeletePartition(1, ts=60)), NOW)
        assert [c.op for c in changes] == ["d"] * (2_000 - 10)  # the static cell goes too: no static-only row


def everything(store: PartitionStore) -> list[tuple[bytes, bytes]]:
    return list(store.items())


def test_a_rollback_leaves_the_db_untouched(store: PartitionStore) -> None:
    schema = table("kv")
    builder = EventBuilder(schema)
    worker = StoreWorker(store, schema)
    worker.batch([builder.event(Write(1, (1,), {"v": 1}, ts=10, ttl=60, insert=True))], NOW)
    before = everything(store)
    offsets = (store.source_offset, store.changelog_offset)
    worker.batch(
        [
            builder.event(Write(1, (2,), {"v": 2}, ts=11, ttl=5)),
            builder.event(DeletePartition(2, ts=3)),
            builder.event(DeleteRow(1, (1,), ts=12)),
        ],
        NOW + 1,
        rollback=True,
    )
    assert everything(store) == before
    assert (store.source_offset, store.changelog_offset) == offsets


def test_reads_see_the_transactions_own_writes(store: PartitionStore) -> None:
    schema = table("kv")
    builder = EventBuilder(schema)
    layout = layout_for(schema)
    first = builder.event(Write(1, (1,), {"v": 1}, ts=10, ttl=60, insert=True))
    second = builder.event(Write(1, (1,), {"w": "x"}, ts=11))
    key = clustering_key(schema, builder.clustering([1]))
    with store.transaction() as txn:
        state = txn.load(schema, prepare_event(first, layout), NOW)
        result, _ = apply_with_changes(state, first, schema, NOW)
        txn.save(schema, state, result.rows, NOW, header=False)
        again = txn.load(schema, prepare_event(second, layout), NOW)
        assert again.rows[key] == state.rows[key]
        _, changes = apply_with_changes(again, second, schema, NOW)
        assert [c.op for c in changes] == ["u"]
        txn.save(schema, again, [key], NOW, header=False)
        assert txn.due_expiries(NOW + 60, 10) == [
            DueExpiry(schema.table_id, builder.partition_key(1), key, NOW + 60)
        ]
        assert txn.remember_digest(b"d" * 16, 1000) and txn.seen_digest(b"d" * 16)
        assert not txn.remember_digest(b"d" * 16, 2000)
        txn.put_meta("mine", b"1")
        assert txn.get_meta("mine") == b"1"
        assert store.read_row(schema.table_id, builder.partition_key(1), key).rows == {}  # not committed
        txn.commit(7, 3)
    assert store.read_row(schema.table_id, builder.partition_key(1), key).rows[key].cells.keys() == {"v", "w"}


def test_commit_persists_state_and_offsets_across_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "p1"
    with PartitionStore(path, 1) as store:
        assert (store.source_offset, store.changelog_offset) == (None, 0)
        with store.transaction() as txn:
            txn.remember_digest(b"x" * 16, 5)
            txn.commit(120, 45)
        assert (store.source_offset, store.changelog_offset) == (120, 45)
        with store.transaction() as txn:
            txn.commit(None, 46)
    with PartitionStore(path, 1) as store:
        assert (store.source_offset, store.changelog_offset) == (None, 46)
        with store.transaction() as txn:
            assert txn.seen_digest(b"x" * 16)


def test_misuse_is_refused_with_the_partition_named(tmp_path: Path) -> None:
    path = tmp_path / "p1"
    with PartitionStore(path, 1) as store:
        txn = store.transaction()
        with pytest.raises(StoreError, match="partition 1 already has an open transaction"):
            store.transaction()
        with pytest.raises(StoreError, match="during an open transaction"):
            store.restore([], 0)
        with pytest.raises(StoreError, match="written by the store"):
            txn.put_meta("source_offset", b"")
        txn.commit(1, 1)
        with pytest.raises(StoreError, match="partition 1 is already finished"):
            txn.seen_digest(b"")
        with pytest.raises(StoreError, match="non-empty bytes"):
            store.restore([(b"", b"v")], 2)
    with pytest.raises(StoreError, match="is of partition 1, not 2"):
        PartitionStore(path, 2)
    with PartitionStore(path, 1) as store:  # still usable after the refused open
        assert store.changelog_offset == 1
        with pytest.raises(StoreError, match="cannot open the state of partition 1"):
            PartitionStore(path, 1)  # RocksDB's lock: one process per directory
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.transaction()
    with PartitionStore(path, 1) as store:
        txn = store.transaction()
        txn.remember_digest(b"x" * 16, 1)
    with pytest.raises(StoreError, match="partition 1 is already finished"):
        txn.seen_digest(b"x" * 16)  # closing the store ended its open transaction


def test_a_directory_of_other_data_is_not_taken_for_a_store(tmp_path: Path) -> None:
    from rocksdict import Options, Rdict

    other = Rdict(str(tmp_path / "other"), Options(raw_mode=True))
    other[b"foreign"] = b"data"
    other.close()
    with pytest.raises(StoreError, match="not a partition store"):
        PartitionStore(tmp_path / "other", 0)


def test_a_store_of_another_format_is_refused(tmp_path: Path) -> None:
    with PartitionStore(tmp_path / "p0", 0) as store:
        store.restore([(meta_key("format"), pack_u64(99))], 0)
    with pytest.raises(StoreError, match="store format 99"):
        PartitionStore(tmp_path / "p0", 0)


# ---------------------------------------------------------------------------------------------------------
# changelog


@pytest.mark.parametrize("seed", range(8))
def test_the_changelog_rebuilds_an_identical_db(tmp_path: Path, seed: int) -> None:
    schema = dataclasses.replace(PROP, gc_grace_seconds=5)
    rng = random.Random(seed)
    with PartitionStore(tmp_path / "a", 2) as source:
        worker = StoreWorker(source, schema)
        now = NOW
        for events in random_batches(seed, schema):
            now += rng.randint(0, 4)
            with source.transaction() as txn:
                for event in events:
                    txn.remember_digest(event["digest"], now * 1000)
                txn.expire_digests((now - 5) * 1000, 100)
                worker.changelog.extend(txn.changelog())
                txn.commit(None, 0)
            worker.batch(events, now)
        assert len(worker.changelog) > 0
        with PartitionStore(tmp_path / "b", 2) as copy:
            log = worker.changelog
            cut = rng.randint(0, len(log))
            copy.restore(iter(log[:cut]), cut)
            copy.restore(iter(log[cut:]), len(log), source_offset=source.source_offset)
            assert copy.changelog_offset == len(log)
            source_items = [(k, v) for k, v in everything(source) if k != meta_key("changelog_offset")]
            copy_items = [(k, v) for k, v in everything(copy) if k != meta_key("changelog_offset")]
            assert copy_items == source_items


# ---------------------------------------------------------------------------------------------------------
# the due index


def test_due_expiries_are_exactly_the_rows_expiring_by_now(store: PartitionStore) -> None:
    schema = table("desc1")
    builder = EventBuilder(schema)
    rng = random.Random(7)
    expiries: dict[bytes, int] = {}
    events = []
    for ck in range(300):
        ttl = rng.choice([0, 0, *range(1, 60)])
        events.append(builder.event(Write(ck % 3, (ck,), {"v": ck}, ts=10, ttl=ttl, insert=True)))
        if ttl:
            expiries[builder.partition_key(ck % 3) + clustering_key(schema, builder.clustering([ck]))] = (
                NOW + ttl
            )
    StoreWorker(store, schema).batch(events, NOW)
    with store.transaction() as txn:
        for now in (NOW, NOW + 1, NOW + 17, NOW + 59, NOW + 100):
            due = txn.due_expiries(now, 1000)
            assert {e.partition_key + e.clustering_key: e.at_s for e in due if e.clustering_key} == {
                k: at for k, at in expiries.items() if at <= now
            }
            assert [e.at_s for e in due] == sorted(e.at_s for e in due)
        assert len(txn.due_expiries(NOW + 100, 10)) == 10
        assert txn.due_expiries(NOW + 100, 0) == []
    # once looked at (and nothing else expiring), a row leaves the index
    worker = StoreWorker(store, schema)
    changes = worker.batch([], NOW + 30)
    expired = sum(1 for at in expiries.values() if at <= NOW + 30)
    assert sum(len(c) for _, c in changes) == expired and all(c.op == "d" for _, cs in changes for c in cs)
    with store.transaction() as txn:
        assert {e.at_s for e in txn.due_expiries(NOW + 30, 1000)} == set()
        assert len(txn.due_expiries(NOW + 100, 1000)) == len(expiries) - expired


def test_a_look_at_part_of_a_partition_announces_the_static_only_row_once(store: PartitionStore) -> None:
    """Rows that expire together, looked at one by one: the first look takes every row that decides
    whether the static-only row shows, so the second look has nothing left to announce."""
    schema = table("kv")
    builder = EventBuilder(schema)
    events = [
        builder.event(Write(1, (), {"s": 1}, ts=10)),
        builder.event(Write(1, (1,), {"v": 1}, ts=10, ttl=10, insert=True)),
        builder.event(Write(1, (2,), {"v": 2}, ts=10, ttl=10, insert=True)),
    ]
    worker = StoreWorker(store, schema, due_limit=1)
    memory = MemoryWorker(schema)
    assert nonempty(worker.batch(events, NOW)) == nonempty(memory.batch(events, NOW))
    got = nonempty(worker.batch([], NOW + 20))
    assert got == nonempty(memory.batch([], NOW + 20))
    assert [c.op for _, changes in got for c in changes] == ["c", "d", "d"]
    assert nonempty(worker.batch([], NOW + 21)) == []


def test_tombstones_are_due_when_gc_grace_has_passed(store: PartitionStore) -> None:
    schema = table("gc")  # gc_grace_seconds = 100
    builder = EventBuilder(schema)
    worker = StoreWorker(store, schema)
    worker.batch(
        [
            builder.event(DeleteRow(1, (1,), ts=20), now=NOW),
            builder.event(DeleteRange(2, low=3, ts=20), now=NOW + 5),
        ],
        NOW + 5,
    )
    with store.transaction() as txn:
        assert [(e.clustering_key is None, e.at_s) for e in txn.due_expiries(NOW + 1000, 10)] == [
            (False, NOW + 101),
            (True, NOW + 106),
        ]
    worker.batch([], NOW + 101)
    assert store.count_rows() == 0
    worker.batch([], NOW + 106)
    assert [k for k, _ in everything(store) if k[:1] != b"M"] == []


# ---------------------------------------------------------------------------------------------------------
# digests


def test_the_digest_horizon_forgets_the_oldest_digests(store: PartitionStore) -> None:
    digests = {bytes([i]) * 16: 1000 + 10 * i for i in range(50)}
    with store.transaction() as txn:
        for digest, ms in digests.items():
            assert txn.remember_digest(digest, ms)
        assert txn.expire_digests(1050, 100) == 0, "remembered in this transaction: a later pass"
        txn.commit(None, 1)
    with store.transaction() as txn:
        assert txn.expire_digests(1050, 100) == 5  # first seen at 1000..1040
        assert txn.expire_digests(1200, 3) == 3  # oldest first
        assert [txn.seen_digest(d) for d in list(digests)[5:9]] == [False, False, False, True]
        assert txn.expire_digests(1200, 100) == 12
        assert txn.expire_digests(1200, 100) == 0
        kept = {d for d in digests if txn.seen_digest(d)}
        assert kept == {d for d, ms in digests.items() if ms >= 1200}
        assert txn.remember_digest(bytes([0]) * 16, 5000)  # forgotten: new again
        txn.commit(None, 2)
    keys = {k[:1] for k, _ in everything(store)}
    assert keys == {b"D", b"E", b"M"}
    assert sum(1 for k, _ in everything(store) if k[:1] == b"D") == 31


def test_the_changelog_carries_a_digest_once_and_a_restore_rebuilds_its_age(tmp_path: Path) -> None:
    with PartitionStore(tmp_path / "a", 4) as source, source.transaction() as txn:
        assert txn.remember_digest(b"a" * 16, 1000) and txn.remember_digest(b"b" * 16, 3000)
        log = txn.changelog()
        txn.commit(None, len(log))
        ages = [k for k, _ in everything(source) if k[:1] == b"E"]
    assert [k[:1] for k, _ in log] == [b"D", b"D"], "one record per digest, no age key"
    assert ages == [digest_age_key(1000, b"a" * 16), digest_age_key(3000, b"b" * 16)]
    older = [*log, (digest_age_key(1000, b"a" * 16), b""), (digest_age_key(3000, b"b" * 16), b"")]
    for name, records in (("new", log), ("older", older)):  # a changelog written before carried both
        with PartitionStore(tmp_path / name, 4) as copy:
            copy.restore(iter(records), len(records))
            assert [k for k, _ in everything(copy) if k[:1] == b"E"] == ages
            with copy.transaction() as txn:
                assert txn.expire_digests(2000, 100) == 1
                assert not txn.seen_digest(b"a" * 16) and txn.seen_digest(b"b" * 16)
                assert {k[:1] for k, v in txn.changelog() if v is None} == {b"D", b"E"}


def test_a_digest_entry_without_a_first_seen_time_is_refused(store: PartitionStore) -> None:
    with pytest.raises(StoreError, match=r"partition 3: digest entry 44(61)+ has a 3-byte value"):
        store.restore([(b"D" + b"a" * 16, b"abc")], 1)


def test_the_memo_of_recent_digests_follows_commits_deletes_and_rollbacks(store: PartitionStore) -> None:
    store.recent_digests = RecentDigests(generation=4)
    digests = [bytes([i]) * 16 for i in range(10)]
    with store.transaction() as txn:
        for i, digest in enumerate(digests):
            assert txn.remember_digest(digest, 1000 + i)
        txn.commit(None, 1)
    assert 0 < len(store.recent_digests) <= 8, "bounded: the oldest generation is dropped whole"
    with store.transaction() as txn:
        reads = txn.reads
        assert txn.seen_digest(digests[-1]) and txn.reads == reads, "a recent digest needs no RocksDB read"
        assert all(txn.seen_digest(d) for d in digests), "older ones are still found in RocksDB"
        assert txn.remember_digest(b"n" * 16, 2000)
        txn.rollback()
    with store.transaction() as txn:
        assert not txn.seen_digest(b"n" * 16), "a rolled-back digest was never stored"
        assert txn.expire_digests(5000, 100) == 10
        txn.commit(None, 2)
    assert len(store.recent_digests) == 0
    with store.transaction() as txn:
        assert not any(txn.seen_digest(d) for d in digests), "expired digests are forgotten by the memo too"

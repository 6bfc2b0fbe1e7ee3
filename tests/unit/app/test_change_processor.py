"""ChangeProcessor on real RocksDB partition stores: raw events in, change records out, per transaction.

The raw events come from ``testkit.event_builder``; every record is decoded back with the JSON codec the
worker uses, so each assertion is on what a consumer of the clean topic would read.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from app.change_processor import MAX_EXPIRY_ROUNDS, ChangeProcessor, CleanRecord
from app.worker_stats import WorkerStats
from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.schema_cql import table_to_cql
from cassandra_model.table_schema import TableSchema
from schemas.change_event import VERSION
from schemas.change_json import JsonChangeCodec
from schemas.raw_event import (
    SNAPSHOT_NODE,
    SNAPSHOT_SEGMENT_ID,
    encode_raw_event,
    raw_event_heads,
    raw_event_write_time,
)
from state.store.merge import CHUNK_ROWS
from state.store.partition_store import PartitionStore, StoreOptions
from state.store.transaction import StateTransaction
from testkit.event_builder import (
    NOW,
    CounterShard,
    DeleteColumns,
    DeletePartition,
    DeleteRange,
    DeleteRow,
    EventBuilder,
    RemoveElements,
    Write,
)
from tests.unit.state.support import table

T = TypeVar("T")

NOW_MS = NOW * 1000
KV = table("kv")  # pk int, ck int, v int, w text, s int static, collections, a UDT
SINGLE = table("single")  # pk int PRIMARY KEY, v int, w text
COUNTERS = table("cnt")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[PartitionStore]:
    with PartitionStore(tmp_path / "p0", 0, StoreOptions(block_cache_bytes=4 << 20)) as opened:
        yield opened


@pytest.fixture
def stats() -> WorkerStats:
    return WorkerStats()


@pytest.fixture
def processor(stats: WorkerStats) -> ChangeProcessor:
    return ChangeProcessor(cluster="c1", topic_prefix="clean", codec=JsonChangeCodec(), stats=stats)


def drive(steps: Generator[None, None, T]) -> T:
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def run(
    processor: ChangeProcessor,
    txn: StateTransaction,
    event: dict[str, Any],
    schema: TableSchema,
    now_ms: int = NOW_MS,
) -> tuple[str, list[CleanRecord]]:
    """The event's outcome and records, as the batch loop gets them (after drop_duplicate let it in)."""
    out: list[CleanRecord] = []
    outcome = drive(processor.process(txn, event, schema, now_ms, out))
    return outcome, out


def commit(store: PartitionStore, txn: StateTransaction) -> None:
    txn.commit(None, store.changelog_offset + len(txn.changelog()))


def committed(
    processor: ChangeProcessor, store: PartitionStore, event: dict[str, Any], schema: TableSchema
) -> tuple[str, list[CleanRecord]]:
    txn = store.transaction()
    result = run(processor, txn, event, schema)
    commit(store, txn)
    return result


def decoded(records: list[CleanRecord]) -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    return [(r.topic, json.loads(r.key), None if r.value is None else json.loads(r.value)) for r in records]


def is_duplicate(processor: ChangeProcessor, txn: StateTransaction, event: dict[str, Any]) -> bool:
    """drop_duplicate on the head of the event as it travels (encoded), as the batch loop calls it."""
    head = raw_event_heads([encode_raw_event(event)])[0]
    assert head is not None
    return processor.drop_duplicate(txn, *head)


def outcomes(stats: WorkerStats, name: str) -> dict[str, int]:
    return {k: v for k, v in stats.tables[name].outcomes.items() if v}


def test_an_insert_emits_one_create_with_its_image_source_and_time(
    processor: ChangeProcessor, store: PartitionStore, stats: WorkerStats
) -> None:
    event = EventBuilder(KV, node="10.0.0.7", segment_id=42).event(
        Write(1, (2,), {"v": 5, "w": "x"}, ts=1_000, insert=True)
    )
    outcome, out = committed(processor, store, event, KV)

    assert outcome == "applied"
    [(topic, key, value)] = decoded(out)
    assert topic == "clean.ks.kv"
    assert key == {"pk": 1, "ck": 2}
    assert value is not None and value["op"] == "c" and value["before"] is None
    assert {k: v for k, v in value["after"].items() if v is not None} == {"pk": 1, "ck": 2, "v": 5, "w": "x"}
    assert value["ts_ms"] == NOW_MS
    assert value["source"] == {
        "version": VERSION,
        "connector": "cassandra",
        "name": "clean",
        "ts_ms": 1,
        "snapshot": "false",
        "db": "ks",
        "table": "kv",
        "cluster": "c1",
        "keyspace": "ks",
        "write_time_us": 1_000,
        "node": "10.0.0.7",
        "segment_id": 42,
        "offset": event["source"]["entry_offset"],
        "expired": False,
    }
    assert stats.document()["tables"] == {
        "ks.kv": {
            "in": 1,
            "duplicates": 0,
            "late": 0,
            "noops": 0,
            "applied": 1,
            "refused": 0,
            "emitted": 1,
            "emitted_by_op": {"c": 1},
            "merged_natively": 0,  # this processor has no native merge
        }
    }
    # the merged row is in the committed RocksDB state, not only in the emitted image
    pk = EventBuilder(KV).partition_key(1)
    assert store.count_rows(KV.table_id) == 1
    assert len(store.read_partition(KV.table_id, pk).rows) == 1


def test_a_replica_copy_is_dropped_on_its_digest_in_the_same_batch_and_in_later_ones(
    processor: ChangeProcessor, store: PartitionStore, stats: WorkerStats
) -> None:
    builder = EventBuilder(SINGLE)
    event = builder.event(Write(1, (), {"v": 1}, ts=10, insert=True))
    copy = dict(event, source={**event["source"], "node": "n2", "entry_offset": 999})  # another replica
    other = builder.event(Write(1, (), {"v": 2}, ts=11))

    txn = store.transaction()
    assert not is_duplicate(processor, txn, event)
    run(processor, txn, event, SINGLE)
    assert is_duplicate(processor, txn, copy), "a copy in the same batch was not dropped"
    assert not is_duplicate(processor, txn, other), "another update was taken for a copy"
    commit(store, txn)

    with store.transaction() as later:
        assert is_duplicate(processor, later, event), "a redelivery after the commit was not dropped"
    assert outcomes(stats, "ks.single") == {"applied": 1, "duplicate": 2}
    assert stats.tables["ks.single"].events_in == 3


def test_a_rolled_back_batch_leaves_neither_digest_nor_row_so_its_redelivery_emits_again(
    processor: ChangeProcessor, store: PartitionStore
) -> None:
    event = EventBuilder(SINGLE).event(Write(7, (), {"v": 1}, ts=10, insert=True))
    txn = store.transaction()
    outcome, first = run(processor, txn, event, SINGLE)
    assert outcome == "applied" and txn.changelog()
    txn.rollback()

    assert store.count_rows() == 0
    txn = store.transaction()
    assert not is_duplicate(processor, txn, event), "the rolled-back batch's digest survived"
    outcome, again = run(processor, txn, event, SINGLE)
    assert outcome == "applied"
    assert again == first


def test_outcomes_late_noop_and_applied_follow_last_write_wins(
    processor: ChangeProcessor, store: PartitionStore, stats: WorkerStats
) -> None:
    builder = EventBuilder(SINGLE)
    committed(processor, store, builder.event(Write(1, (), {"v": 1}, ts=100, insert=True)), SINGLE)

    outcome, out = committed(processor, store, builder.event(Write(1, (), {"v": 9}, ts=50)), SINGLE)
    assert (outcome, out) == ("late", []), "an older write changed the row"

    outcome, out = committed(processor, store, builder.event(Write(1, (), {"v": 1}, ts=200)), SINGLE)
    assert (outcome, out) == ("noop", []), "the same value written again was emitted"

    outcome, out = committed(processor, store, builder.event(Write(1, (), {"v": 2}, ts=300)), SINGLE)
    assert outcome == "applied"
    [(_, key, value)] = decoded(out)
    assert key == {"pk": 1}
    assert value is not None and value["op"] == "u"
    assert (value["before"]["v"], value["after"]["v"]) == (1, 2)
    assert value["source"]["write_time_us"] == 300
    assert outcomes(stats, "ks.single") == {"applied": 2, "late": 1, "noop": 1}


def test_a_row_deletion_emits_the_delete_then_a_null_value_for_log_compaction(
    processor: ChangeProcessor, store: PartitionStore, stats: WorkerStats
) -> None:
    builder = EventBuilder(KV)
    committed(processor, store, builder.event(Write(1, (2,), {"v": 5}, ts=10, insert=True)), KV)

    outcome, out = committed(processor, store, builder.event(DeleteRow(1, (2,), ts=20)), KV)

    assert outcome == "applied"
    [(topic, key, value), (tomb_topic, tomb_key, tombstone)] = decoded(out)
    assert value is not None and value["op"] == "d" and value["after"] is None
    assert value["before"]["v"] == 5
    assert value["source"]["write_time_us"] == 20, "a deletion carries the event's write time"
    assert (tomb_topic, tomb_key, tombstone) == (topic, key, None)
    assert stats.tables["ks.kv"].emitted == {"c": 1, "d": 1}
    # the deletion is in the committed state: a write older than it stays deleted
    outcome, out = committed(processor, store, builder.event(Write(1, (2,), {"v": 6}, ts=15)), KV)
    assert (outcome, out) == ("late", [])


def write_times(records: list[CleanRecord]) -> list[tuple[str, Any, int]]:
    """(op, key, source.write_time_us) of each change event (tombstones aside)."""
    return [
        (value["op"], key.get("ck", key["pk"]), value["source"]["write_time_us"])
        for _, key, value in decoded(records)
        if value is not None
    ]


def test_setting_a_column_to_null_carries_the_statements_time_not_the_rows_newest_cell(
    processor: ChangeProcessor, store: PartitionStore
) -> None:
    """Deleting one column at 300 leaves a row whose newest visible cell was written at 100: the
    update was made by the write at 300."""
    builder = EventBuilder(SINGLE)
    committed(processor, store, builder.event(Write(1, (), {"v": 1, "w": "a"}, ts=100)), SINGLE)
    outcome, out = committed(processor, store, builder.event(DeleteColumns(1, (), ("w",), ts=300)), SINGLE)
    assert outcome == "applied"
    [(_, _, value)] = decoded(out)
    assert value is not None and value["op"] == "u" and value["after"]["w"] is None
    assert value["source"]["write_time_us"] == 300
    assert value["source"]["ts_ms"] == 0  # 300 µs


def test_removing_an_element_carries_the_removals_time(
    processor: ChangeProcessor, store: PartitionStore
) -> None:
    builder = EventBuilder(KV)
    committed(processor, store, builder.event(Write(1, (1,), {"v": 1, "st": {1, 2}}, ts=100)), KV)
    _, out = committed(processor, store, builder.event(RemoveElements(1, (1,), "st", [1], ts=250)), KV)
    assert write_times(out) == [("u", 1, 250)]


def test_partition_and_range_deletions_stamp_the_rows_they_change_with_their_own_time(
    processor: ChangeProcessor, store: PartitionStore
) -> None:
    """Rows keeping a newer cell are updated, the others deleted; either change is the deletion's."""
    builder = EventBuilder(KV)
    for ck in (1, 2, 3):
        committed(processor, store, builder.event(Write(1, (ck,), {"v": ck, "w": "old"}, ts=100)), KV)
    committed(processor, store, builder.event(Write(1, (2,), {"w": "newer"}, ts=500)), KV)
    _, out = committed(processor, store, builder.event(DeleteRange(1, (), low=1, high=2, ts=200)), KV)
    assert write_times(out) == [("d", 1, 200), ("u", 2, 200)]
    committed(processor, store, builder.event(Write(1, (3,), {"w": "newest"}, ts=600)), KV)
    _, out = committed(processor, store, builder.event(DeletePartition(1, ts=550)), KV)
    assert write_times(out) == [("d", 2, 550), ("u", 3, 550)]


def test_a_static_change_stamps_every_row_with_the_static_writes_time(
    processor: ChangeProcessor, store: PartitionStore
) -> None:
    builder = EventBuilder(KV)
    committed(processor, store, builder.event(Write(1, (1,), {"v": 1}, ts=100)), KV)
    committed(processor, store, builder.event(Write(1, (2,), {"v": 2}, ts=900)), KV)
    _, out = committed(processor, store, builder.event(Write(1, (), {"s": 7}, ts=300)), KV)
    assert write_times(out) == [("u", 1, 300), ("u", 2, 300)]
    # the same value again, newer: the static columns look the same, so no row changes
    _, out = committed(processor, store, builder.event(Write(1, (), {"s": 7}, ts=400)), KV)
    assert write_times(out) == []


def test_a_cell_that_loses_to_a_newer_one_does_not_stamp_the_change(
    processor: ChangeProcessor, store: PartitionStore
) -> None:
    """One update (a batch) writes v at 200 and w at 300, but the row keeps a w written at 500: the change
    is v's, made at 200."""
    builder = EventBuilder(SINGLE)
    committed(processor, store, builder.event(Write(1, (), {"w": "kept"}, ts=500)), SINGLE)
    event = builder.event(Write(1, (), {"v": 5, "w": "lost"}, ts=300))
    [row] = event["rows"]
    for cell in row["cells"]:
        if cell["column"] == "v":
            cell["timestamp"] = 200
    _, out = committed(processor, store, event, SINGLE)
    assert write_times(out) == [("u", 1, 200)]


def test_a_bootstrap_read_carries_the_rows_newest_visible_cell(
    processor: ChangeProcessor, store: PartitionStore
) -> None:
    """A snapshot event is no write: its change shows the row's newest visible cell, as WRITETIME does."""
    builder = EventBuilder(SINGLE)
    committed(processor, store, builder.event(Write(1, (), {"v": 1}, ts=900)), SINGLE)
    event = builder.event(Write(1, (), {"w": "read"}, ts=50))
    event["source"] = {**event["source"], "node": SNAPSHOT_NODE, "segment_id": SNAPSHOT_SEGMENT_ID}
    _, out = committed(processor, store, event, SINGLE)
    assert write_times(out) == [("u", 1, 900)]


def test_a_snapshot_event_names_no_node_segment_or_offset(
    processor: ChangeProcessor, store: PartitionStore
) -> None:
    event = EventBuilder(SINGLE).event(Write(3, (), {"v": 1}, ts=10, insert=True))
    event["source"] = {**event["source"], "node": SNAPSHOT_NODE, "segment_id": SNAPSHOT_SEGMENT_ID}
    _, out = committed(processor, store, event, SINGLE)
    [(_, _, value)] = decoded(out)
    assert value is not None
    source = value["source"]
    assert (source["node"], source["segment_id"], source["offset"], source["snapshot"]) == (
        None,
        None,
        None,
        "true",
    )


def test_refused_counter_tables_merge_nothing_and_remember_no_digest(
    store: PartitionStore, stats: WorkerStats
) -> None:
    refusing = ChangeProcessor(
        cluster="c1", topic_prefix="clean", codec=JsonChangeCodec(), stats=stats, refuse_counters=True
    )
    event = EventBuilder(COUNTERS).event(CounterShard(1, (1,), "c", counter_id=1, clock=1, count=5, ts=10))
    txn = store.transaction()
    outcome, out = run(refusing, txn, event, COUNTERS)
    assert (outcome, out, txn.changelog()) == ("refused", [], [])
    assert not is_duplicate(refusing, txn, event)
    txn.rollback()
    assert outcomes(stats, "ks.cnt") == {"refused": 1}

    # a table that is not a counter table is merged by the same refusing processor
    single = EventBuilder(SINGLE).event(Write(1, (), {"v": 1}, ts=10, insert=True))
    with store.transaction() as txn:
        assert run(refusing, txn, single, SINGLE)[0] == "applied"
    # and counters are merged when not refused
    with store.transaction() as txn:
        accepting = ChangeProcessor(cluster="c1", topic_prefix="clean", codec=JsonChangeCodec(), stats=stats)
        outcome, out = run(accepting, txn, event, COUNTERS)
        assert outcome == "applied"
        [(_, _, value)] = decoded(out)
        assert value is not None and value["after"]["c"] == 5


def wide_partition(builder: EventBuilder, rows: int, ts: int) -> dict[str, Any]:
    """One event inserting ``rows`` rows into partition 1 (an unlogged batch to one partition)."""
    return builder.raw_event(
        1,
        rows=[
            builder.row(
                builder.clustering((ck,)),
                liveness=(ts, 0, None),
                cells=[builder.cell("v", ck.to_bytes(4, "big"), ts)],
            )
            for ck in range(rows)
        ],
    )


def test_a_partition_deletion_of_a_wide_partition_yields_its_changes_in_chunks(
    processor: ChangeProcessor, store: PartitionStore
) -> None:
    """``process`` yields while it sweeps, with records already in ``out``: the batch loop can send them
    on before the last row is read (one d and one compaction null per row)."""
    rows = 2 * CHUNK_ROWS + 500
    builder = EventBuilder(KV)
    committed(processor, store, wide_partition(builder, rows, ts=10), KV)

    out: list[CleanRecord] = []
    with store.transaction() as txn:
        steps = processor.process(txn, builder.event(DeletePartition(1, ts=20)), KV, NOW_MS, out)
        seen_at_yields: list[int] = []
        while True:
            try:
                next(steps)
            except StopIteration as done:
                outcome = done.value
                break
            seen_at_yields.append(len(out))
            out.clear()  # what the batch loop does once it sent them
    assert outcome == "applied"
    assert sum(seen_at_yields) + len(out) == 2 * rows
    assert len([n for n in seen_at_yields if n]) >= 3, f"records per yield: {seen_at_yields}"
    assert max(seen_at_yields) <= 2 * CHUNK_ROWS


def ttl_write(builder: EventBuilder, key: int, ttl: int) -> dict[str, Any]:
    return builder.event(Write(key, (), {"v": key}, ts=NOW * 1_000_000, ttl=ttl, insert=True), now=NOW)


def test_an_expired_ttl_emits_a_delete_marked_expired_at_its_expiry_time(
    processor: ChangeProcessor, store: PartitionStore, stats: WorkerStats
) -> None:
    builder = EventBuilder(SINGLE)
    committed(processor, store, ttl_write(builder, 1, ttl=100), SINGLE)
    schemas = {SINGLE.table_id: SINGLE}

    with store.transaction() as txn:
        out: list[CleanRecord] = []
        assert drive(processor.expire(txn, schemas, (NOW + 99) * 1000, out)) == 0
        assert out == [], "a live TTL was expired early"

    out = []
    txn = store.transaction()
    looked = drive(processor.expire(txn, schemas, (NOW + 101) * 1000, out))
    commit(store, txn)
    assert looked >= 1
    [(topic, key, value), (_, _, tombstone)] = decoded(out)
    assert (topic, key, tombstone) == ("clean.ks.single", {"pk": 1}, None)
    assert value is not None and value["op"] == "d" and value["before"]["v"] == 1
    source = value["source"]
    assert source["expired"] is True
    assert source["write_time_us"] == (NOW + 100) * 1_000_000, "not the expiry's own time"
    assert (source["node"], source["segment_id"], source["offset"]) == (None, None, None)
    assert value["ts_ms"] == (NOW + 101) * 1000
    assert stats.registry.get_sample_value("cdc_worker_expiry_changes_total") == 1
    assert stats.tables["ks.single"].emitted == {"c": 1, "d": 1}

    with store.transaction() as txn:
        out = []
        drive(processor.expire(txn, schemas, (NOW + 200) * 1000, out))
        assert out == [], "an expiry committed once was emitted again"


def test_an_expiry_of_a_table_without_schema_is_kept_for_later_and_not_looked_at_again_and_again(
    processor: ChangeProcessor, store: PartitionStore
) -> None:
    builder = EventBuilder(SINGLE)
    committed(processor, store, ttl_write(builder, 1, ttl=10), SINGLE)
    committed(processor, store, ttl_write(builder, 2, ttl=10), SINGLE)
    later_ms = (NOW + 11) * 1000

    txn = store.transaction()
    out: list[CleanRecord] = []
    looked = drive(processor.expire(txn, {}, later_ms, out))
    assert out == []
    assert looked == 2, (
        f"the unknown table's entries were looked at {looked} times (up to {MAX_EXPIRY_ROUNDS})"
    )
    commit(store, txn)

    with store.transaction() as txn:
        drive(processor.expire(txn, {SINGLE.table_id: SINGLE}, later_ms, out))
    assert sorted(key["pk"] for _, key, value in decoded(out) if value is not None) == [1, 2]


def test_expiry_is_driven_to_the_end_even_past_one_look_of_limit_entries(
    processor: ChangeProcessor, store: PartitionStore
) -> None:
    """``limit`` only sizes each look: every entry due by now goes out in the one call."""
    builder = EventBuilder(SINGLE)
    txn = store.transaction()
    for key in range(7):
        run(processor, txn, ttl_write(builder, key, ttl=5), SINGLE)
    commit(store, txn)
    out: list[CleanRecord] = []
    with store.transaction() as txn:
        looked = drive(processor.expire(txn, {SINGLE.table_id: SINGLE}, (NOW + 6) * 1000, out, limit=2))
    assert looked == 7
    assert sorted(key["pk"] for _, key, value in decoded(out) if value is not None) == list(range(7))


def test_event_write_time_is_the_newest_timestamp_of_any_part() -> None:
    builder = EventBuilder(KV)
    base = builder.event(Write(1, (2,), {"v": 1, "s": 3}, ts=40, insert=True))
    assert raw_event_write_time(base) == 40
    rows = [
        builder.row(builder.clustering((1,)), cells=[builder.cell("v", b"\x00\x00\x00\x01", 10)]),
        builder.row(builder.clustering((2,)), liveness=(15, 0, None), deletion=(12, NOW)),
        builder.row(builder.clustering((3,)), complex_deletions=[("l", 25, NOW)]),
    ]
    assert raw_event_write_time(builder.raw_event(1, rows=rows)) == 25
    assert raw_event_write_time(builder.raw_event(1, rows=rows, partition_deletion=(30, NOW))) == 30
    static = builder.row([], cells=[builder.cell("s", b"\x00\x00\x00\x01", 35)])
    assert raw_event_write_time(builder.raw_event(1, rows=rows, static_row=static)) == 35
    ranged = builder.event(DeleteRange(1, (), low=3, high=8, ts=45))
    assert raw_event_write_time(ranged) == 45


def dropping(schema: TableSchema, column: str, at_us: int) -> TableSchema:
    """``schema`` after ``ALTER TABLE ... DROP column`` at ``at_us``, as a schema event brings it."""
    catalog = load_schema_from_cql(
        f"{table_to_cql(schema)};\nALTER TABLE {schema.name} DROP {column} USING TIMESTAMP {at_us};"
    )
    dropped = catalog.get(schema.table_id)
    assert dropped is not None and dropped.dropped_time(column) == at_us
    return dropped


def show_drops(processor: ChangeProcessor, store: PartitionStore, schema: TableSchema) -> list[CleanRecord]:
    txn = store.transaction()
    out: list[CleanRecord] = []
    before = processor.drops_to_show(txn, schema)
    if before is not None:
        drive(processor.show_drops(txn, before, schema, NOW_MS, out))
    commit(store, txn)
    return out


def test_a_drop_deletes_the_rows_that_lived_only_by_the_dropped_column(
    processor: ChangeProcessor, store: PartitionStore, stats: WorkerStats
) -> None:
    builder = EventBuilder(KV)
    assert show_drops(processor, store, KV) == []  # the first version a partition sees is only recorded
    for op in (
        Write(1, (1,), {"v": 1}, ts=100),  # lives by v alone
        Write(1, (2,), {"v": 2, "w": "kept"}, ts=100),
        Write(1, (3,), {"v": 3}, ts=100, insert=True),  # its row marker keeps it
        Write(2, (), {"s": 7}, ts=100),
        Write(2, (1,), {"v": 9}, ts=100),  # partition 2's only row: its static-only row shows after
    ):
        committed(processor, store, builder.event(op), KV)
    without_v = dropping(KV, "v", 5_000)
    got = [(value and value["op"], key) for _, key, value in decoded(show_drops(processor, store, without_v))]
    assert got == [
        ("d", {"pk": 1, "ck": 1}),
        (None, {"pk": 1, "ck": 1}),
        ("d", {"pk": 2, "ck": 1}),
        (None, {"pk": 2, "ck": 1}),
        ("c", {"pk": 2, "ck": None}),
    ]
    records = decoded(show_drops(processor, store, without_v))
    assert records == []  # shown once
    store_txn = store.transaction()
    assert processor.drops_to_show(store_txn, without_v) is None
    store_txn.rollback()
    assert outcomes(stats, "ks.kv")["applied"] == 5


def test_a_drops_delete_shows_the_row_as_it_was_at_the_drops_time(
    processor: ChangeProcessor, store: PartitionStore
) -> None:
    builder = EventBuilder(SINGLE)
    show_drops(processor, store, SINGLE)
    committed(processor, store, builder.event(Write(4, (), {"w": "only"}, ts=100)), SINGLE)
    [(_, key, value), (_, _, tombstone)] = decoded(show_drops(processor, store, dropping(SINGLE, "w", 7_000)))
    assert tombstone is None and key == {"pk": 4}
    assert value is not None and value["before"] == {"pk": 4, "v": None, "w": "only"}
    assert (value["op"], value["after"], value["source"]["write_time_us"]) == ("d", None, 7_000)

"""Bootstrap raw events from scanned rows: merged by the workers' own code, they must give back the rows
that were read, with their write times, and behave like any write under last-write-wins."""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import uuid
from typing import Any

import pytest

from cassandra_model.cql_types import NATIVE_TYPES, VectorType
from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.table_schema import TableSchema
from cassandra_model.value_serializer import serialize as serialize_value
from pipeline.cassandra_scan import (
    MAX_TOKEN,
    MIN_TOKEN,
    SCAN_TIME_KEY,
    UdtValue,
    scan_spec,
    token_ranges,
    ttl_key,
    write_time_key,
)
from pipeline.errors import PipelineError
from pipeline.snapshot_events import partition_updates, snapshot_event, table_events
from runtime.config import CdcConfig
from schemas.change_event import ChangeSource, change_envelope
from schemas.driver_rows import driver_value
from schemas.raw_event import (
    decode_raw_event,
    decode_raw_key,
    is_snapshot_source,
    peek_raw_event,
)
from state.change import apply_prepared_with_changes, apply_with_changes
from state.partition_state import PartitionState, prepare_event
from state.row_image import RowImage, decode_row, regular_image, static_columns
from state.snapshot_lists import adopt_snapshot_list_paths, drop_known_list_elements, is_snapshot_list_path
from state.table_layout import layout_for

DDL = """
CREATE TYPE ks.addr (street text, zip int);
CREATE TABLE ks.items (pk int, ck text, s text static, v int, tags set<text>, attrs map<text, int>,
    home addr, nums list<int>, fixed frozen<addr>, at timestamp, PRIMARY KEY (pk, ck))
    WITH ID = 00000000-0000-0000-0000-0000000000b1;
CREATE TABLE ks.hits (id int PRIMARY KEY, n counter) WITH ID = 00000000-0000-0000-0000-0000000000b2;
"""
CATALOG = load_schema_from_cql(DDL)
ITEMS = CATALOG.by_name("ks", "items")
HITS = CATALOG.by_name("ks", "hits")
SCAN_TIME = 1_800_000_000
NOW = SCAN_TIME + 1


def scanned(
    schema: TableSchema, values: dict[str, Any], times: dict[str, Any], ttls: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A row as ``scan_table(with_write_times=True)`` yields it."""
    row: dict[str, Any] = {c.name: values.get(c.name) for c in schema.all_columns()}
    for name in [*schema.static_columns, *schema.regular_columns]:
        row[write_time_key(name)] = times.get(name) if row[name] is not None else None
        row[ttl_key(name)] = (ttls or {}).get(name) if row[name] is not None else None
    row[SCAN_TIME_KEY] = SCAN_TIME
    return row


def row_values(pk: int, ck: str, **extra: Any) -> dict[str, Any]:
    return {
        "pk": pk,
        "ck": ck,
        "s": f"static{pk}",
        "v": pk * 10,
        "tags": {"z", ck, "a"},
        "attrs": {ck: pk, "m": 1},
        "home": UdtValue(street=f"street {pk}", zip=None),
        "nums": [3, 1, 2],
        "fixed": UdtValue(street=ck, zip=7),
        "at": dt.datetime(2024, 5, 6, 7, 8, 9, 123000),
        **extra,
    }


def row_times(base: int) -> dict[str, Any]:
    return {
        "s": base,
        "v": base + 1,
        "tags": [base, base + 2, base + 3],  # Cassandra's order: a, ck, z (for ck in b..y)
        "attrs": [base, base + 4],
        "home": [base + 5, None],  # one per field of the type; zip has no cell
        "nums": [base + 9, base + 6, base + 7],  # the first element was prepended later
        "fixed": base,
        "at": base,
    }


def merge(
    schema: TableSchema, rows: list[dict[str, Any]], state: PartitionState | None = None, **kw: Any
) -> tuple[PartitionState, list[dict[str, Any]]]:
    """Every event of the rows through the workers' merge; returns the state and the envelopes."""
    envelopes = []
    for _, events in table_events(schema, rows, cluster="c", published_at_ms=5, **kw):
        for event in events:
            record = decode_raw_event(event.value)
            assert is_snapshot_source(record["source"])
            if state is None:
                state = PartitionState(record["partition_key"])
            _, changes = apply_with_changes(state, record, schema, NOW)
            source = ChangeSource("c", schema.keyspace, schema.table, None, None, None, None, snapshot=True)
            envelopes += [change_envelope(change, schema, source, 1) for change in changes]
    assert state is not None
    return state, envelopes


def expected_image(schema: TableSchema, values: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for column in schema.all_columns():
        value = driver_value(column.type, values.get(column.name))
        if isinstance(value, list) and column.name == "tags":
            value = sorted(value)
        out[column.name] = value
    if isinstance(out.get("home"), dict) and all(v is None for v in out["home"].values()):
        out["home"] = None
    return out


def image(state: PartitionState, schema: TableSchema, key: bytes, now: int = NOW) -> RowImage | None:
    layout = layout_for(schema)
    return regular_image(state, key, layout, now, static_columns(state, layout, now))


def test_merged_events_give_back_the_scanned_rows_as_reads_with_their_write_times() -> None:
    rows = [
        scanned(ITEMS, row_values(1, ck), row_times(1000 * i), {"v": 60} if ck == "c" else None)
        for i, ck in enumerate(["b", "c"], start=1)
    ]
    state, envelopes = merge(ITEMS, rows)
    assert [e["op"] for e in envelopes] == ["r", "r"]
    for envelope, row in zip(envelopes, rows, strict=True):
        assert envelope["source"]["snapshot"] == "true" and envelope["before"] is None
        values = {c.name: row[c.name] for c in ITEMS.all_columns()}
        assert envelope["after"] == expected_image(ITEMS, values)
    # every cell carries the write time it was read with; the TTL'd cell expires at scan time + TTL
    for key, row in zip(state.sorted_keys(), rows, strict=True):
        found = image(state, ITEMS, key)
        assert found is not None
        assert found.regular["v"].timestamp == row[write_time_key("v")]
        assert found.static["s"].timestamp == rows[0][write_time_key("s")]  # read once per partition
        assert sorted(c.timestamp for c in found.regular["tags"]) == sorted(row[write_time_key("tags")])
        assert [c.timestamp for c in found.regular["nums"]] == row[write_time_key("nums")]
        if row[ttl_key("v")]:
            assert found.regular["v"].expires_at() == SCAN_TIME + row[ttl_key("v")]
            after = image(state, ITEMS, key, SCAN_TIME + row[ttl_key("v")])
            assert after is not None and "v" not in after.regular
        else:
            assert found.regular["v"].expires_at() is None


def test_a_second_read_of_the_same_rows_repeats_the_digests_and_the_head_peeks() -> None:
    rows = [scanned(ITEMS, row_values(2, "b"), row_times(10))]
    first = [e for _, events in table_events(ITEMS, rows, cluster="c", published_at_ms=1) for e in events]
    again = [e for _, events in table_events(ITEMS, rows, cluster="c", published_at_ms=99) for e in events]
    assert [e.digest for e in first] == [e.digest for e in again]
    head = peek_raw_event(first[0].value)
    assert (head.keyspace, head.table, head.digest) == ("ks", "items", first[0].digest)
    keyspace, table, partition_key = decode_raw_key(first[0].key)
    assert (keyspace, table) == ("ks", "items")
    assert partition_key == decode_raw_event(first[0].value)["partition_key"]
    changed = [scanned(ITEMS, row_values(2, "b", v=1), row_times(10))]
    other = next(
        e for _, events in table_events(ITEMS, changed, cluster="c", published_at_ms=1) for e in events
    )
    assert other.digest != first[0].digest


@pytest.mark.parametrize("live_first", [True, False])
def test_a_newer_live_value_wins_whatever_arrives_first(live_first: bool) -> None:
    old = scanned(ITEMS, row_values(3, "b"), row_times(100))
    newer = scanned(ITEMS, {"pk": 3, "ck": "b", "v": 777}, {"v": 10_000})
    pieces = [[newer], [old]] if live_first else [[old], [newer]]
    state = None
    for rows in pieces:
        state, _ = merge(ITEMS, rows, state)
    assert state is not None
    found = image(state, ITEMS, state.sorted_keys()[0])
    assert found is not None
    assert decode_row(found, ITEMS)["v"] == 777
    assert decode_row(found, ITEMS)["tags"] == sorted(old["tags"])


def test_list_paths_keep_the_list_order_and_later_appends_sort_after_them() -> None:
    nums = [5, 4, 3, 2, 1]
    times = [900, 100, 500, 200, 100]  # prepends and appends at various times
    row = scanned(ITEMS, {"pk": 4, "ck": "b", "nums": nums}, {"nums": times})
    (update,) = partition_updates(ITEMS, [row])
    paths = [c.path for c in update.rows[0].cells]
    order = layout_for(ITEMS).regular["nums"].path_order
    assert order is not None
    assert sorted(paths, key=order) == paths
    assert [uuid.UUID(bytes=p).version for p in paths] == [1] * len(nums)
    append = uuid.uuid1().bytes  # a live append now: a newer timeuuid
    assert order(append) > order(paths[-1])
    state, _ = merge(ITEMS, [row])
    found = image(state, ITEMS, state.sorted_keys()[0])
    assert found is not None and decode_row(found, ITEMS)["nums"] == nums


def test_wide_partitions_are_cut_and_merge_to_the_same_rows() -> None:
    rows = [scanned(ITEMS, row_values(5, f"c{i}"), row_times(100 + i)) for i in range(5)]
    updates = partition_updates(ITEMS, rows, max_rows=2)
    assert [len(u.rows) for u in updates] == [2, 2, 1]
    assert [u.static_row is not None for u in updates] == [True, False, False]
    whole, _ = merge(ITEMS, rows)
    cut, _ = merge(ITEMS, rows, max_rows=2)
    assert cut == whole
    by_bytes = partition_updates(ITEMS, rows, max_bytes=1)
    assert len(by_bytes) == len(rows)


def test_row_liveness_policy() -> None:
    static = {"s": "x"}  # every scanned row of a partition shows its static columns
    bare = scanned(ITEMS, {"pk": 6, "ck": "bare", **static}, {"s": 40})
    full = scanned(
        ITEMS, {"pk": 6, "ck": "full", "v": 1, "tags": {"q"}, **static}, {"s": 40, "v": 70, "tags": [50]}
    )
    ttl = scanned(
        ITEMS,
        {"pk": 6, "ck": "ttl", "v": 2, "tags": {"q"}, **static},
        {"s": 40, "v": 80, "tags": [90]},
        {"v": 100, "tags": [300]},
    )
    mixed = scanned(
        ITEMS,
        {"pk": 6, "ck": "mixed", "v": 3, "tags": {"q"}, **static},
        {"s": 40, "v": 60, "tags": [95]},
        {"v": 100},
    )
    (update,) = partition_updates(ITEMS, [bare, full, ttl, mixed])
    rows = {r.clustering[0]: r for r in update.rows}
    assert update.static_row is not None
    everything = [c.timestamp for r in update.rows for c in r.cells] + [
        c.timestamp for c in update.static_row.cells
    ]
    # a row without regular cells: the partition's smallest write time
    assert rows["bare"].timestamp == min(everything) and rows["bare"].ttl == 0
    # the smallest write time of the row's cells; expiring only when every cell expires, at the last
    assert rows["full"].timestamp == min(c.timestamp for c in rows["full"].cells) and rows["full"].ttl == 0
    assert rows["ttl"].timestamp == min(c.timestamp for c in rows["ttl"].cells)
    assert rows["ttl"].local_expiration_time == max(c.local_deletion_time for c in rows["ttl"].cells)
    assert rows["mixed"].ttl == 0 and rows["mixed"].local_expiration_time is None
    # so the TTL'd row disappears when its last cell expires, as an INSERT ... USING TTL would
    state, envelopes = merge(ITEMS, [bare, full, ttl, mixed])
    assert len(envelopes) == 4
    keys = {decode_row(image(state, ITEMS, k), ITEMS)["ck"]: k for k in state.sorted_keys()}  # type: ignore[arg-type]
    assert image(state, ITEMS, keys["ttl"], SCAN_TIME + 299) is not None
    assert image(state, ITEMS, keys["ttl"], SCAN_TIME + 300) is None
    assert image(state, ITEMS, keys["mixed"], SCAN_TIME + 10_000) is not None


def test_a_partition_with_only_static_cells_is_its_static_row() -> None:
    row = scanned(ITEMS, {"pk": 7, "s": "only"}, {"s": 5})
    (update,) = partition_updates(ITEMS, [row])
    assert update.rows == [] and update.static_row is not None
    _, envelopes = merge(ITEMS, [row])
    assert [e["op"] for e in envelopes] == ["r"]
    assert envelopes[0]["after"] == expected_image(ITEMS, {"pk": 7, "s": "only"})


def test_the_snapshot_event_keeps_the_agents_record_shape() -> None:
    (update,) = partition_updates(ITEMS, [scanned(ITEMS, row_values(8, "b"), row_times(1))])
    event = snapshot_event(update, cluster="c", published_at_ms=3)
    record = decode_raw_event(event.value)
    assert record["source"]["published_at_ms"] == 3 and record["source"]["cluster"] == "c"
    assert record["table_id"] == str(ITEMS.table_id) and not record["is_counter"]
    set_cells = [c for c in record["rows"][0]["cells"] if c["column"] == "tags"]
    assert all(c["value"] == b"" and c["flags"] & 0x04 for c in set_cells)
    assert event.rows == 1 and event.cells == update.cell_count()


def test_counter_tables_and_bad_consistency_are_refused_by_name() -> None:
    assert HITS is not None
    with pytest.raises(PipelineError, match=r"ks\.hits is a counter table"):
        scan_spec(CdcConfig(), HITS, with_write_times=True)
    scan_spec(CdcConfig(), HITS, with_write_times=False)  # reconcile may read counters
    with pytest.raises(PipelineError, match=r"ks\.items: consistency 'TWO'"):
        scan_spec(CdcConfig(), ITEMS, with_write_times=False, consistency="two")


@pytest.mark.parametrize("splits", [1, 3, 64])
def test_token_ranges_cover_the_ring_without_overlap(splits: int) -> None:
    ranges = token_ranges(splits)
    assert len(ranges) == splits
    assert ranges[0][0] == MIN_TOKEN and ranges[-1][1] == MAX_TOKEN
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert all(start < end for start, end in ranges)


@pytest.mark.parametrize(
    ("element", "value"),
    [("float", [1.5, -2.0, 0.25]), ("text", ["a", "", "x" * 300]), ("bigint", [2**40, -1])],
)
def test_vectors_serialize_to_what_the_decoder_reads(element: str, value: list[Any]) -> None:
    t = VectorType(NATIVE_TYPES[element], len(value))
    assert t.decode(serialize_value(t, value)) == value


def test_list_elements_the_stream_delivered_are_not_added_again_under_generated_paths() -> None:
    row = scanned(ITEMS, {"pk": 9, "ck": "b", "nums": [4, 4, 6], "v": 1}, {"nums": [500, 500, 700], "v": 500})
    (event,) = [e for _, events in table_events(ITEMS, [row], cluster="c", published_at_ms=1) for e in events]
    snapshot = decode_raw_event(event.value)
    # the same writes as the agents publish them: real (unknown to CQL) timeuuid paths, a node's source
    stream = copy.deepcopy(snapshot)
    stream["source"] = {**stream["source"], "node": "node1", "segment_id": 7}
    for cell in stream["rows"][0]["cells"]:
        if cell["column"] == "nums":
            cell["path"] = uuid.uuid1().bytes
    layout = layout_for(ITEMS)
    state = PartitionState(snapshot["partition_key"])
    apply_with_changes(state, stream, ITEMS, NOW)
    prepared = prepare_event(snapshot, layout)
    drop_known_list_elements(state, prepared, layout)
    _, changes = apply_prepared_with_changes(state, prepared, layout, NOW)
    assert changes == []
    found = image(state, ITEMS, state.sorted_keys()[0])
    assert found is not None and decode_row(found, ITEMS)["nums"] == row["nums"]
    # an element the stream never had (written before CDC) is still added
    older = scanned(ITEMS, {"pk": 9, "ck": "b", "nums": [3, 4, 4, 6]}, {"nums": [100, 500, 500, 700]})
    (event,) = [
        e for _, events in table_events(ITEMS, [older], cluster="c", published_at_ms=1) for e in events
    ]
    prepared = prepare_event(decode_raw_event(event.value), layout)
    drop_known_list_elements(state, prepared, layout)
    apply_prepared_with_changes(state, prepared, layout, NOW)
    found = image(state, ITEMS, state.sorted_keys()[0])
    assert found is not None and sorted(decode_row(found, ITEMS)["nums"]) == sorted(older["nums"])


def test_list_elements_the_stream_brings_after_the_bootstrap_are_the_same_cells() -> None:
    row = scanned(ITEMS, {"pk": 9, "ck": "b", "nums": [4, 4, 6]}, {"nums": [500, 500, 700]})
    (event,) = [e for _, events in table_events(ITEMS, [row], cluster="c", published_at_ms=1) for e in events]
    snapshot = decode_raw_event(event.value)
    stream = copy.deepcopy(snapshot)
    stream["source"] = {**stream["source"], "node": "node1", "segment_id": 7}
    for cell in stream["rows"][0]["cells"]:
        cell["path"] = uuid.uuid1().bytes
    layout = layout_for(ITEMS)
    state = PartitionState(snapshot["partition_key"])
    apply_with_changes(state, snapshot, ITEMS, NOW)
    prepared = prepare_event(stream, layout)
    adopt_snapshot_list_paths(state, prepared, layout)
    _, changes = apply_prepared_with_changes(state, prepared, layout, NOW)
    assert changes == []
    found = image(state, ITEMS, state.sorted_keys()[0])
    assert found is not None and decode_row(found, ITEMS)["nums"] == row["nums"]
    assert all(is_snapshot_list_path(c.path) for c in found.regular["nums"])

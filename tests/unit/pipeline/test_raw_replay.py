"""Replay's core: the raw events of one partition, in any order and with duplicates, merged into the row
images the workers' state code computes, keyed as the clean topics key them, with TTL expiries near
``now`` reported as unsettled and foreign or undecodable records counted, not merged."""

from __future__ import annotations

import copy
import datetime as dt
import decimal
import itertools
import json
import pickle
import random
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.table_schema import TableSchema
from pipeline import native_core, raw_replay
from pipeline.raw_replay import (
    PartitionReplay,
    clean_key_text,
    merge_events,
    replay_encoded,
    replay_partition,
)
from pipeline.replay_job import _clean_record, _lake_row
from pipeline.snapshot_events import table_events
from schemas.change_event import change_key
from schemas.change_json import JsonChangeCodec, json_value_row
from schemas.driver_rows import key_text
from schemas.raw_event import RawEventError, decode_raw_event, encode_raw_event
from state.row_image import RowImage, decode_row, partition_images
from testkit.event_builder import (
    NOW,
    AddElements,
    DeleteColumns,
    DeletePartition,
    DeleteRange,
    DeleteRow,
    EventBuilder,
    RemoveElements,
    SetField,
    Write,
)
from tests.unit.pipeline.test_snapshot_events import ITEMS, scanned
from tests.unit.state.random_history import SCHEMA as PROP
from tests.unit.state.random_history import random_history
from tests.unit.state.support import merged, shuffled_with_duplicates, table

KV = table("kv")  # (pk int, ck int) with v, w, static s, list l, set st, map m, udt a
SINGLE = table("single")  # pk int PRIMARY KEY, v int, w text

#: ks.single dropped and created again: same name, another table id
OLD_SINGLE = load_schema_from_cql(
    "CREATE TABLE ks.single (pk int PRIMARY KEY, v int, w text) "
    "WITH ID = 00000000-0000-0000-0000-0000000000f6;"
).by_name("ks", "single")

#: key columns of types whose JSON form is not the Python value (and non-ASCII text)
KEYS = load_schema_from_cql(
    "CREATE TABLE ks.keys (p1 text, p2 uuid, c1 timestamp, c2 decimal, c3 blob, s int static, v text, "
    "PRIMARY KEY ((p1, p2), c1, c2, c3)) WITH ID = 00000000-0000-0000-0000-0000000000e1;"
).by_name("ks", "keys")

CODEC = JsonChangeCodec()


# ---------------------------------------------------------------------------------------------------------
# the expected side, from the state code directly


def clean_key(schema: TableSchema, image: RowImage) -> bytes:
    """The Kafka key a worker gives this row on its clean topic."""
    return CODEC.encode_key(schema, change_key(schema, image))


def expected_rows(
    events: list[dict[str, Any]], schema: TableSchema, now: int
) -> list[tuple[str, dict[str, Any], int | None]]:
    """(key text, JSON-form image, write time) of every visible row of the events applied once in order,
    keyed as ``replay_job`` keys a clean-topic record (key_text of its decoded Kafka key)."""
    out = []
    for image in partition_images(merged(events, schema), schema, now):
        row = json.loads(json.dumps(json_value_row(schema, decode_row(image, schema))))
        out.append((key_text(json.loads(clean_key(schema, image))), row, image.write_time()))
    return out


def images_by_key(events: list[dict[str, Any]], schema: TableSchema, now: int) -> dict[str, dict[str, Any]]:
    return {key: row for key, row, _ in expected_rows(events, schema, now)}


def changed_keys(events: list[dict[str, Any]], schema: TableSchema, since: int, now: int) -> set[str]:
    """Keys whose visible image differs between ``since`` and ``now`` (appears, goes, or changes)."""
    before = images_by_key(events, schema, since)
    after = images_by_key(events, schema, now)
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


def got_rows(result: PartitionReplay) -> list[tuple[str, dict[str, Any], int | None]]:
    return [(row.key, row.image, row.write_time_us) for row in result.rows]


def kv_history() -> list[dict[str, Any]]:
    """One ks.kv partition touched by every kind of write: collections, UDT fields, static, TTLs,
    column, row, range and (older) partition deletions."""
    ops = [
        Write(
            1,
            (1,),
            {
                "v": 1,
                "w": "a",
                "l": [1, 2],
                "st": {3, 4},
                "m": {"x": 1},
                "a": {"street": "s", "nr": 1},
                "s": 5,
            },
            ts=10,
            insert=True,
        ),
        Write(1, (2,), {"v": 2, "w": "b"}, ts=10, ttl=20, insert=True),
        AddElements(1, (1,), "l", [9], ts=11),
        AddElements(1, (1,), "m", {"y": 2}, ts=12, ttl=15),
        RemoveElements(1, (1,), "st", [3], ts=13),
        SetField(1, (1,), "a", "nr", 7, ts=14),
        DeleteColumns(1, (1,), ("w",), ts=15),
        Write(1, (3,), {"v": 3}, ts=10, insert=True),
        DeleteRow(1, (3,), ts=9),  # older than the insert: the row stays
        Write(1, (4,), {"v": 4}, ts=10, insert=True),
        DeleteRange(1, (), 4, 5, ts=11),
        DeletePartition(1, ts=5),
        Write(1, (5,), {"v": 5}, ts=4, insert=True),  # shadowed by the partition deletion
        Write(1, (6,), {"v": 6}, ts=20, insert=True),
        Write(1, (6,), {"w": "gone soon"}, ts=21, ttl=8),
    ]
    return EventBuilder(KV).events(ops)


# ---------------------------------------------------------------------------------------------------------
# any order, any duplicates


@pytest.mark.parametrize("now", [NOW, NOW + 9, NOW + 16, NOW + 30])
def test_shuffled_duplicated_events_give_the_images_of_the_events_applied_once_in_order(now: int) -> None:
    events = kv_history()
    expected = expected_rows(events, KV, now)
    assert expected  # the history keeps rows 1, 3 and 6 at every now
    for seed in range(5):
        copies = shuffled_with_duplicates(events, random.Random(seed))
        result = replay_partition(copies, KV, now)
        assert got_rows(result) == expected, seed
        assert (result.events, result.skipped, result.undecodable) == (len(copies), 0, 0)
        assert result.unsettled == []  # settle_s defaults to 0


def test_the_kv_history_changes_with_time() -> None:
    """The TTLs of ``kv_history`` show in the replayed images, so the ordering test covers expiry too."""
    events = kv_history()
    seen = [got_rows(replay_partition(events, KV, now)) for now in (NOW, NOW + 9, NOW + 16, NOW + 30)]
    assert all(a != b for a, b in itertools.pairwise(seen))
    assert len(seen[0]) > len(seen[-1])  # row 2 expired


def test_random_histories_replay_in_any_order_with_their_settle_windows() -> None:
    rows_seen = unsettled_seen = 0
    for seed in range(40):
        events = random_history(seed)
        for now in (NOW + 4, NOW + 12, NOW + 25, NOW + 40):
            expected = expected_rows(events, PROP, now)
            for order in range(3):
                rng = random.Random(seed * 1000 + order)
                result = replay_partition(shuffled_with_duplicates(events, rng), PROP, now, settle_s=10)
                assert got_rows(result) == expected, (seed, now, order)
                assert len(result.unsettled) == len(set(result.unsettled)), (seed, now)
                assert set(result.unsettled) == changed_keys(events, PROP, now - 10, now), (seed, now)
            rows_seen += len(expected)
            unsettled_seen += len(result.unsettled)
    assert rows_seen and unsettled_seen  # the histories are not all empty or TTL-free


def test_merge_events_is_the_in_order_state_whatever_the_order() -> None:
    events = kv_history()
    state, count = merge_events(shuffled_with_duplicates(events, random.Random(7)), KV)
    assert state == merged(events, KV)
    assert count >= len(events)
    assert merge_events([], KV) == (None, 0)


def test_no_events_replay_to_nothing() -> None:
    assert replay_partition([], KV, NOW, settle_s=10) == PartitionReplay()
    assert replay_encoded([], KV, NOW, settle_s=10) == PartitionReplay()


# ---------------------------------------------------------------------------------------------------------
# encoded events and a shipped schema


def test_encoded_events_with_a_pickled_schema_replay_like_the_decoded_ones() -> None:
    events = kv_history()
    shipped = pickle.loads(pickle.dumps(KV))
    assert shipped is not KV
    for seed in range(3):
        copies = shuffled_with_duplicates(events, random.Random(seed))
        values = [encode_raw_event(e) for e in copies]
        for now in (NOW + 9, NOW + 25):
            result = replay_encoded(values, shipped, now, settle_s=10)
            assert result == replay_partition(copies, KV, now, settle_s=10)
            assert got_rows(result) == expected_rows(events, KV, now)


def test_replayed_row_json_is_its_image() -> None:
    for row in replay_partition(kv_history(), KV, NOW).rows:
        assert json.loads(row.json()) == row.image


# ---------------------------------------------------------------------------------------------------------
# TTL


def ttl_events() -> list[dict[str, Any]]:
    """Row 1 expires at NOW+100, row 2's ``w`` at NOW+50 (the row stays), row 3 has no TTL."""
    return EventBuilder(KV).events(
        [
            Write(1, (1,), {"v": 1}, ts=1, ttl=100, insert=True),
            Write(1, (2,), {"v": 2}, ts=1, insert=True),
            Write(1, (2,), {"w": "x"}, ts=2, ttl=50),
            Write(1, (3,), {"v": 3}, ts=1, insert=True),
        ]
    )


def kv_key(ck: int | None) -> str:
    return key_text({"pk": 1, "ck": ck})


def rows_at(events: list[dict[str, Any]], now: int) -> dict[str, dict[str, Any]]:
    return {row.key: row.image for row in replay_partition(events, KV, now).rows}


def test_a_ttl_row_is_replayed_before_its_expiry_and_not_after() -> None:
    events = ttl_events()
    assert set(rows_at(events, NOW + 99)) == {kv_key(1), kv_key(2), kv_key(3)}
    assert set(rows_at(events, NOW + 100)) == {kv_key(2), kv_key(3)}
    assert rows_at(events, NOW + 99)[kv_key(1)]["v"] == 1


def test_a_ttl_cell_is_replayed_before_its_expiry_and_not_after() -> None:
    events = ttl_events()
    assert rows_at(events, NOW + 49)[kv_key(2)]["w"] == "x"
    after = rows_at(events, NOW + 50)[kv_key(2)]
    assert after["w"] is None
    assert after["v"] == 2


@pytest.mark.parametrize(
    ("now", "settle", "expiring"),
    [
        (NOW + 100, 0, set()),  # no window
        (NOW + 100, 1, {1}),  # NOW+100 in (NOW+99, NOW+100]
        (NOW + 100, 50, {1}),  # NOW+50 is not in (NOW+50, NOW+100]
        (NOW + 100, 51, {1, 2}),
        (NOW + 101, 1, set()),  # NOW+100 is not in (NOW+100, NOW+101]
        (NOW + 55, 10, {2}),
        (NOW + 49, 49, set()),  # nothing expired yet
    ],
)
def test_settle_names_exactly_the_keys_an_expiry_changed_in_the_window(
    now: int, settle: int, expiring: set[int]
) -> None:
    events = ttl_events()
    result = replay_partition(events, KV, now, settle_s=settle)
    assert sorted(result.unsettled) == sorted(kv_key(ck) for ck in expiring)
    if settle:
        assert set(result.unsettled) == changed_keys(events, KV, now - settle, now)
    # the images themselves do not depend on the window
    assert result.rows == replay_partition(events, KV, now).rows
    assert (kv_key(1) in {row.key for row in result.rows}) == (now < NOW + 100)


def test_an_expiring_static_cell_unsettles_every_row_of_the_partition() -> None:
    events = ttl_events() + EventBuilder(KV).events([Write(1, (), {"s": 7}, ts=3, ttl=30)])
    before = replay_partition(events, KV, NOW + 29)
    assert {row.image["s"] for row in before.rows} == {7}
    result = replay_partition(events, KV, NOW + 30, settle_s=5)
    assert {row.image["s"] for row in result.rows} == {None}
    assert sorted(result.unsettled) == sorted(row.key for row in before.rows)


def test_a_static_only_row_that_expires_is_unsettled_under_its_null_clustering_key() -> None:
    events = EventBuilder(KV).events([Write(1, (), {"s": 7}, ts=3, ttl=30)])
    assert [row.key for row in replay_partition(events, KV, NOW + 29).rows] == [kv_key(None)]
    result = replay_partition(events, KV, NOW + 30, settle_s=5)
    assert result.rows == []
    assert result.unsettled == [kv_key(None)]


# ---------------------------------------------------------------------------------------------------------
# foreign and undecodable records


def single_events() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Events of ks.single and of the dropped ks.single (same name, another id), same partition key;
    the dropped table's writes are newer, so merging them would change the row."""
    mine = EventBuilder(SINGLE).events([Write(1, (), {"v": 1, "w": "new"}, ts=5, insert=True)])
    old = EventBuilder(OLD_SINGLE).events(
        [Write(1, (), {"v": 2, "w": "old"}, ts=9, insert=True), Write(1, (), {"v": 3}, ts=10)]
    )
    return mine, old


def test_events_of_another_table_id_with_the_same_name_are_skipped_and_counted() -> None:
    mine, old = single_events()
    assert old[0]["keyspace"] == mine[0]["keyspace"] and old[0]["table"] == mine[0]["table"]
    assert old[0]["table_id"] != mine[0]["table_id"]
    mixed = shuffled_with_duplicates(mine + old, random.Random(3))
    result = replay_partition(mixed, SINGLE, NOW)
    assert got_rows(result) == expected_rows(mine, SINGLE, NOW)
    assert result.skipped == sum(e["table_id"] == old[0]["table_id"] for e in mixed)
    assert result.events == len(mixed) - result.skipped
    # had they been merged, the images would differ
    relabelled = [{**e, "table_id": mine[0]["table_id"]} for e in old]
    assert got_rows(replay_partition(mine + relabelled, SINGLE, NOW)) != got_rows(result)


def test_only_foreign_events_replay_to_no_rows() -> None:
    _, old = single_events()
    result = replay_partition(old, SINGLE, NOW, settle_s=10)
    assert (result.rows, result.unsettled, result.events, result.skipped) == ([], [], 0, len(old))


def test_undecodable_records_are_counted_and_left_out() -> None:
    mine, old = single_events()
    good = encode_raw_event(mine[0])
    bad = [b"", b"\xff\xfe not avro", good[: len(good) // 2], encode_raw_event({**mine[0], "format": 2})]
    for value in bad:
        with pytest.raises(RawEventError):
            decode_raw_event(value)
    values = [good, *bad, good, *(encode_raw_event(e) for e in old)]
    result = replay_encoded(values, SINGLE, NOW)
    assert result.undecodable == len(bad)
    assert result.skipped == len(old)
    assert result.events == 2
    assert got_rows(result) == expected_rows(mine, SINGLE, NOW)


def test_the_replay_reads_with_the_native_core_where_installed_and_gets_the_python_readers_rows() -> None:
    if native_core.decode_raw_event is None:
        pytest.skip("the native core is not installed (make setup builds it)")
    assert raw_replay._read_event.__qualname__ == "raw_event_reader.<locals>.decode"
    mine, old = single_events()
    good = [encode_raw_event(e) for e in [*mine, *old]]
    values = [*good, good[0][:-3], b"\x02\x00"]
    python = replay_partition([decode_raw_event(v) for v in good], SINGLE, NOW, settle_s=10)
    python.undecodable = 2
    assert replay_encoded(values, SINGLE, NOW, settle_s=10) == python


def test_only_undecodable_records_replay_to_no_rows() -> None:
    result = replay_encoded([b"", b"\x00"], SINGLE, NOW)
    assert (result.rows, result.events, result.undecodable) == ([], 0, 2)


# ---------------------------------------------------------------------------------------------------------
# keys


def keys_events() -> list[dict[str, Any]]:
    """Two partitions of ks.keys (non-ASCII text, uuid, timestamp, decimal, blob keys), one with rows
    and one with only a static cell (the static-only row, clustering columns null)."""
    pk = ('Zürich ☃ "q"', uuid.UUID("12345678-1234-5678-1234-567812345678"))
    other = ("ü", uuid.UUID(int=1))
    at = dt.datetime(2024, 5, 6, 7, 8, 9, 123000)
    ops = [
        Write(pk, (at, decimal.Decimal("1.50"), b"\x00\xff"), {"v": "é", "s": 1}, ts=1, insert=True),
        Write(pk, (at, decimal.Decimal("-2E+3"), b""), {"v": "x"}, ts=2, insert=True),
        Write(other, (), {"s": 2}, ts=3),
    ]
    return EventBuilder(KEYS).events(ops)


def test_row_keys_are_the_clean_topic_keys_as_replay_job_reads_them() -> None:
    events = keys_events()
    checked = 0
    for partition in (events[:2], events[2:]):
        result = replay_partition(partition, KEYS, NOW)
        images = partition_images(merged(partition, KEYS), KEYS, NOW)
        assert len(result.rows) == len(images) > 0
        for row, image in zip(result.rows, images, strict=True):
            kafka_key = clean_key(KEYS, image)
            record = SimpleNamespace(key=bytearray(kafka_key), value=None, partition=0, offset=1)
            assert row.key == _clean_record(record)[0] == key_text(json.loads(kafka_key))
            checked += 1
    assert checked == 3


def test_clean_key_text_is_the_codec_key() -> None:
    """``clean_key_text`` (a lake table's ``_cdc_key``) spells a row's key byte for byte as the codec."""
    events = keys_events()
    for partition in (events[:2], events[2:]):
        result = replay_partition(partition, KEYS, NOW)
        images = partition_images(merged(partition, KEYS), KEYS, NOW)
        for row, image in zip(result.rows, images, strict=True):
            codec_key = clean_key(KEYS, image).decode()
            assert clean_key_text(KEYS, row.image) == codec_key
            assert _lake_row(KEYS, (row.json(), row.write_time_us)) == (
                codec_key,
                row.json(),
                image.write_time(),
            )


# ---------------------------------------------------------------------------------------------------------
# bootstrap (snapshot) events of lists


def test_a_list_the_stream_and_the_bootstrap_both_bring_is_replayed_once_in_any_order() -> None:
    """A row written before the bootstrap read it reaches the raw topic twice: from the commit log, its
    list elements under their real cell paths, and from the bootstrap under generated ones. The workers
    merge them as the same cells (``state.snapshot_lists``); replay must too, whatever the order."""
    row = scanned(ITEMS, {"pk": 9, "ck": "b", "v": 1, "nums": [4, 4, 6]}, {"v": 500, "nums": [500, 500, 700]})
    (event,) = [e for _, events in table_events(ITEMS, [row], cluster="c", published_at_ms=1) for e in events]
    snapshot = decode_raw_event(event.value)
    stream = copy.deepcopy(snapshot)
    stream["source"] = {**stream["source"], "node": "node1", "segment_id": 7}
    for cell in stream["rows"][0]["cells"]:
        if cell["column"] == "nums":
            cell["path"] = uuid.uuid1().bytes
    for events in ([snapshot, stream], [stream, snapshot], [stream, snapshot, stream, snapshot]):
        (replayed,) = replay_partition(copy.deepcopy(events), ITEMS, NOW).rows
        assert replayed.image["nums"] == [4, 4, 6], [e["source"]["node"] for e in events]

"""Change events: topic names, keys and Debezium envelopes with full row images."""

from __future__ import annotations

from typing import Any

import pytest

from schemas import load_avro_schema
from schemas.change_event import (
    VERSION,
    ChangeEventError,
    ChangeSource,
    change_envelope,
    change_key,
    clean_topic_name,
)
from state import PartitionState, RowChange, apply_with_changes
from testkit.event_builder import NOW, DeletePartition, DeleteRow, EventBuilder, Operation, Write
from tests.unit.state.support import table

SCHEMA = table("kv")  # pk int, ck int, v int, w text, s int static, l list<int>, st set<int>, m map, a addr
BUILDER = EventBuilder(SCHEMA)
SOURCE = ChangeSource("main", "ks", "kv", 10, "10.0.0.1", 7, 1234)
NULLS = dict.fromkeys(["pk", "ck", "s", "a", "l", "m", "st", "v", "w"])


def run(ops: list[Operation], schema: Any = SCHEMA) -> list[list[RowChange]]:
    builder = EventBuilder(schema) if schema is not SCHEMA else BUILDER
    state = PartitionState(builder.partition_key(1))
    return [apply_with_changes(state, builder.event(op), schema, NOW)[1] for op in ops]


# ---------------------------------------------------------------------------------------------------------
# topics


def test_clean_topic_name() -> None:
    assert clean_topic_name("cdc", "shop", "orders") == "cdc.shop.orders"
    assert clean_topic_name("prod.cdc-v1", "Shop_1", "Orders") == "prod.cdc-v1.Shop_1.Orders"


@pytest.mark.parametrize(
    ("prefix", "keyspace", "name", "why"),
    [
        ("", "ks", "t", "prefix '' must be non-empty"),
        ("c dc", "ks", "t", "prefix 'c dc' must be non-empty and use only"),
        ("cdc", "k/s", "t", "keyspace 'k/s'"),
        ("cdc", "ks", "Größe", "table 'Größe'"),
        ("cdc", "ks.x", "t", "keyspace 'ks.x' contains a '.'"),
        ("cdc", "ks", "", "table ''"),
        (".cdc", "ks", "t", "empty dot-separated part"),
        ("a..b", "ks", "t", "empty dot-separated part"),
        ("p" * 241, "ks", "table", "longer than Kafka's 249"),
    ],
)
def test_clean_topic_name_refuses_what_kafka_refuses(prefix: str, keyspace: str, name: str, why: str) -> None:
    with pytest.raises(ChangeEventError, match=why.replace("(", r"\(")):
        clean_topic_name(prefix, keyspace, name)


# ---------------------------------------------------------------------------------------------------------
# keys and envelopes


def test_source_record_matches_its_avro_schema() -> None:
    fields = [f["name"] for f in load_avro_schema("change_source")["fields"]]
    assert list(SOURCE.as_dict(99)) == fields
    assert SOURCE.as_dict(99) == {
        "version": VERSION,
        "connector": "cassandra",
        "name": "cdc",
        "ts_ms": 0,  # the write time (10 µs) in milliseconds, not the emit time
        "snapshot": "false",
        "db": "ks",
        "table": "kv",
        "cluster": "main",
        "keyspace": "ks",
        "write_time_us": 10,
        "node": "10.0.0.1",
        "segment_id": 7,
        "offset": 1234,
        "expired": False,
    }


def test_source_carries_the_emit_time_when_the_change_has_no_write_time() -> None:
    read = ChangeSource("main", "ks", "kv", None, None, None, None, snapshot=True, name="prod.cdc")
    assert read.as_dict(1_234) | {"version": None} == {
        "version": None,
        "connector": "cassandra",
        "name": "prod.cdc",
        "ts_ms": 1_234,
        "snapshot": "true",
        "db": "ks",
        "table": "kv",
        "cluster": "main",
        "keyspace": "ks",
        "write_time_us": None,
        "node": None,
        "segment_id": None,
        "offset": None,
        "expired": False,
    }


def test_source_version_is_the_installed_projects() -> None:
    from importlib import metadata

    assert metadata.version("cassandra-cdc") == VERSION


def test_create_update_delete_envelopes_carry_full_images() -> None:
    (created,), (updated,), (deleted,) = run(
        [
            Write(1, (2,), {"v": 1, "l": [1, 2], "a": {"street": "x", "nr": 3}}, ts=10, insert=True),
            Write(1, (2,), {"w": "hello", "v": None}, ts=11),
            DeleteRow(1, (2,), ts=12),
        ]
    )
    first = {**NULLS, "pk": 1, "ck": 2, "v": 1, "l": [1, 2], "a": {"street": "x", "nr": 3}}
    second = {**first, "v": None, "w": "hello"}

    env = change_envelope(created, SCHEMA, SOURCE, 99)
    assert env == {"before": None, "after": first, "op": "c", "source": SOURCE.as_dict(99), "ts_ms": 99}
    assert list(env["after"]) == list(NULLS)  # every column, key columns first, static ones included

    env = change_envelope(updated, SCHEMA, SOURCE, 100)
    assert env["op"] == "u" and env["before"] == first and env["after"] == second

    env = change_envelope(deleted, SCHEMA, SOURCE, 101)
    assert env["op"] == "d" and env["before"] == second and env["after"] is None

    assert change_key(SCHEMA, deleted) == {"pk": 1, "ck": 2}  # the key of the tombstone that follows
    assert change_key(SCHEMA, created.after) == {"pk": 1, "ck": 2}  # type: ignore[arg-type]


def test_static_columns_are_in_every_image_and_the_static_only_row_has_null_clustering() -> None:
    (only,), (gone, row), (update,), (row_gone,) = run(
        [
            Write(1, (), {"s": 5}, ts=10),  # static only: the static-only row appears
            Write(1, (3,), {"v": 7}, ts=11, insert=True),  # a real row replaces it
            Write(1, (), {"s": 6}, ts=12),  # a static change changes every row
            DeletePartition(1, ts=13),
        ]
    )
    static_row = {**NULLS, "pk": 1, "s": 5}
    env = change_envelope(only, SCHEMA, SOURCE, 1)
    assert env["op"] == "c" and env["after"] == static_row
    assert change_key(SCHEMA, only) == {"pk": 1, "ck": None}

    env = change_envelope(gone, SCHEMA, SOURCE, 2)
    assert (
        env["op"] == "d" and env["before"] == static_row and change_key(SCHEMA, gone) == {"pk": 1, "ck": None}
    )
    env = change_envelope(row, SCHEMA, SOURCE, 2)
    assert env["op"] == "c" and env["after"] == {**NULLS, "pk": 1, "ck": 3, "s": 5, "v": 7}

    env = change_envelope(update, SCHEMA, SOURCE, 3)
    assert env["op"] == "u" and env["before"]["s"] == 5 and env["after"]["s"] == 6

    env = change_envelope(row_gone, SCHEMA, SOURCE, 4)
    assert env["op"] == "d" and env["before"] == {**NULLS, "pk": 1, "ck": 3, "s": 6, "v": 7}


def test_table_without_clustering() -> None:
    schema = table("single")
    ((created,),) = run([Write(1, (), {"w": "x"}, ts=1, insert=True)], schema)
    assert change_key(schema, created) == {"pk": 1}
    assert change_envelope(created, schema, SOURCE, 1)["after"] == {"pk": 1, "v": None, "w": "x"}


def test_snapshot_source_makes_reads() -> None:
    ((created,), (updated,)) = run(
        [Write(1, (2,), {"v": 1}, ts=10, insert=True), Write(1, (2,), {"v": 2}, ts=11)]
    )
    snapshot = ChangeSource("main", "ks", "kv", None, None, None, None, snapshot=True)
    env = change_envelope(created, SCHEMA, snapshot, 5)
    assert env["op"] == "r" and env["source"]["snapshot"] == "true" and env["source"]["segment_id"] is None
    # a bootstrap read completing a row that live writes already made is an update, marked as snapshot
    env = change_envelope(updated, SCHEMA, snapshot, 5)
    assert env["op"] == "u" and env["source"]["snapshot"] == "true"
    assert env["before"] == change_envelope(created, SCHEMA, SOURCE, 5)["after"]


def test_inconsistent_changes_are_refused() -> None:
    ((created,),) = run([Write(1, (2,), {"v": 1}, ts=10, insert=True)])
    with pytest.raises(ChangeEventError, match=r"ks\.kv: unknown change op 'x'"):
        change_envelope(RowChange("x", created.key, None, created.after), SCHEMA, SOURCE, 1)
    with pytest.raises(ChangeEventError, match=r"ks\.kv: op 'u' with before=None"):
        change_envelope(RowChange("u", created.key, None, created.after), SCHEMA, SOURCE, 1)
    with pytest.raises(ChangeEventError, match="neither a before nor an after"):
        change_key(SCHEMA, RowChange("d", None, None, None))

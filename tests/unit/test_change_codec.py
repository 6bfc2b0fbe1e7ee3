"""Change-event codecs: every CQL type through JSON and Avro, in the documented form, and their errors."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import io
import json
import math
import random
import re
import struct
import uuid
from typing import Any

import pytest
from cassandra.util import Duration as DriverDuration
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.validation import validate

from cassandra_model.cql_types import CqlTime, Duration
from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.table_schema import TableSchema
from schemas.change_avro import AvroChangeCodec, without_branches
from schemas.change_avro_names import avro_name, cql_name_of
from schemas.change_avro_reader import avro_decimal
from schemas.change_avro_schema import decimal_record
from schemas.change_codec import ChangeDecodingError, ChangeEncodingError, encode_change_via_envelope
from schemas.change_conversions import nanos_of_day
from schemas.change_event import ChangeSource, change_envelope, change_key
from schemas.change_json import JsonChangeCodec, json_value_row
from schemas.registry_client import InMemorySchemaRegistryClient, SchemaRegistryError
from state import PartitionState, RowChange, apply_with_changes
from testkit.event_builder import NOW, CounterShard, DeleteRow, EventBuilder, Operation, Raw, Write

DDL = """
CREATE TYPE ks.addr (street text, "Zip-Code" int, tags frozen<set<text>>);
CREATE TYPE ks.point (x double, y double);
CREATE TABLE ks.everything (
    pk uuid, "Part 2" text, ck1 timestamp, ck2 frozen<tuple<int, text>>,
    s_text text static, s_map map<int, text> static,
    c_ascii ascii, c_bigint bigint, c_blob blob, c_boolean boolean, c_date date, c_decimal decimal,
    c_double double, c_duration duration, c_float float, c_inet inet, c_inet6 inet, c_int int,
    c_smallint smallint, c_text text, c_time time, c_timestamp timestamp, c_timeuuid timeuuid,
    c_tinyint tinyint, c_uuid uuid, c_varchar varchar, c_varint varint,
    c_list list<int>, c_set set<text>, c_map map<text, int>, c_map_uuid map<uuid, frozen<list<int>>>,
    c_nested list<frozen<map<int, frozen<set<text>>>>>, c_tuple tuple<int, text, frozen<list<double>>>,
    c_udt frozen<addr>, c_udt_nf addr, c_vector vector<float, 3>, "weird col" int, "_x" text, "Größe" int,
    c_map_tuple_key map<frozen<tuple<int, text>>, text>, c_set_udt set<frozen<point>>,
    c_map_list_key map<frozen<list<int>>, int>, c_custom 'org.example.CustomType',
    c_frozen_list frozen<list<timestamp>>, c_date_far date, c_ts_far timestamp, c_null int,
    PRIMARY KEY ((pk, "Part 2"), ck1, ck2)) WITH ID = 00000000-0000-0000-0000-0000000000e1;
CREATE TABLE ks.cnt (pk int, ck text, hits counter, misses counter, PRIMARY KEY (pk, ck))
    WITH ID = 00000000-0000-0000-0000-0000000000e2;
CREATE TABLE ks.simple (id int PRIMARY KEY, v double, w text) WITH ID = 00000000-0000-0000-0000-0000000000e3;
CREATE TABLE ks.udtkey (pk int, ck frozen<addr>, v int, PRIMARY KEY (pk, ck))
    WITH ID = 00000000-0000-0000-0000-0000000000e4;
CREATE TABLE ks.names ("a-b" int PRIMARY KEY, "_a_2d_b" int, "A-B" int, "a b" int, a_b int)
    WITH ID = 00000000-0000-0000-0000-0000000000e5;
CREATE TABLE ks.scalars (id uuid, ts timestamp, i int, b bigint, d double, t text, f boolean, u timeuuid,
    s text static, PRIMARY KEY (id, ts)) WITH ID = 00000000-0000-0000-0000-0000000000e6;
"""
CATALOG = load_schema_from_cql(DDL)


def table(name: str) -> TableSchema:
    schema = CATALOG.by_name("ks", name)
    assert schema is not None
    return schema


EVERYTHING = table("everything")
PK = (uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8"), "p2")
CK = (dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=dt.UTC), (7, "seven"))
SOURCE = ChangeSource("main", "ks", "everything", 1_700_000_000_000_001, "10.0.0.1", 42, 4096)

VALUES: dict[str, Any] = {
    "s_text": "static!",
    "s_map": {2: "b", 1: "a"},
    "c_ascii": "abc",
    "c_bigint": -9007199254740993,
    "c_blob": b"\x00\xffhi",
    "c_boolean": True,
    "c_date": dt.date(2024, 2, 29),
    "c_decimal": decimal.Decimal("-12345.6789"),
    "c_double": -math.inf,
    "c_duration": DriverDuration(1, 2, 3),
    "c_float": 0.25,
    "c_inet": "10.1.2.3",
    "c_inet6": "2001:db8::1",
    "c_int": -5,
    "c_smallint": 300,
    "c_text": "héllo ✓",
    "c_time": 47655123456789,
    "c_timestamp": dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC),
    "c_timeuuid": uuid.UUID("e1d1b7a0-0b8a-11ef-8000-000000000001"),
    "c_tinyint": -7,
    "c_uuid": uuid.UUID(int=1),
    "c_varchar": "v",
    "c_varint": 2**70 + 1,
    "c_list": [3, 1, 2],
    "c_set": {"b", "a"},
    "c_map": {"k1": 1, "k2": 2},
    "c_map_uuid": {uuid.UUID(int=2): [1, 2]},
    "c_nested": [{1: {"x", "y"}}, {}],
    "c_tuple": (1, None, [1.5, 2.5]),
    "c_udt": {"street": "Main", "Zip-Code": 12345, "tags": {"a"}},
    "c_udt_nf": {"street": "Side", "Zip-Code": None, "tags": None},
    "c_vector": Raw(struct.pack(">3f", 1.0, 2.5, -3.0)),
    "weird col": 42,
    "_x": "underscore",
    "Größe": 7,
    "c_map_tuple_key": {(1, "a"): "t"},
    "c_set_udt": [{"x": 1.0, "y": 2.0}],
    "c_map_list_key": {(1, 2): 3},
    "c_custom": Raw(b"\x01\x02"),
    "c_frozen_list": [dt.datetime(2000, 1, 1, tzinfo=dt.UTC)],
    "c_date_far": Raw((0).to_bytes(4, "big")),
    "c_ts_far": Raw(struct.pack(">q", 2**62)),
}

#: the JSON form of the row above, as the module notes document it
JSON_ROW: dict[str, Any] = {
    "pk": "6ba7b810-9dad-11d1-80b4-00c04fd430c8",
    "Part 2": "p2",
    "ck1": 1714979289123,
    "ck2": [7, "seven"],
    "s_map": [[1, "a"], [2, "b"]],
    "s_text": "static!",
    "_x": "underscore",
    "c_ascii": "abc",
    "c_bigint": -9007199254740993,
    "c_blob": "AP9oaQ==",
    "c_boolean": True,
    "c_custom": "AQI=",
    "c_date": 19782,
    "c_date_far": -(2**31),
    "c_decimal": "-12345.6789",
    "c_double": "-Infinity",
    "c_duration": {"months": 1, "days": 2, "nanos": 3},
    "c_float": 0.25,
    "c_frozen_list": [946684800000],
    "c_inet": "10.1.2.3",
    "c_inet6": "2001:db8::1",
    "c_int": -5,
    "c_list": [3, 1, 2],
    "c_map": {"k1": 1, "k2": 2},
    "c_map_list_key": [[[1, 2], 3]],
    "c_map_tuple_key": [[[1, "a"], "t"]],
    "c_map_uuid": [["00000000-0000-0000-0000-000000000002", [1, 2]]],
    "c_nested": [[[1, ["x", "y"]]], []],
    "c_null": None,
    "c_set": ["a", "b"],
    "c_set_udt": [{"x": 1.0, "y": 2.0}],
    "c_smallint": 300,
    "c_text": "héllo ✓",
    "c_time": 47655123456789,
    "c_timestamp": -1,
    "c_timeuuid": "e1d1b7a0-0b8a-11ef-8000-000000000001",
    "c_tinyint": -7,
    "c_ts_far": 2**62,
    "c_tuple": [1, None, [1.5, 2.5]],
    "c_udt": {"street": "Main", "Zip-Code": 12345, "tags": ["a"]},
    "c_udt_nf": {"street": "Side", "Zip-Code": None, "tags": None},
    "c_uuid": "00000000-0000-0000-0000-000000000001",
    "c_varchar": "v",
    "c_varint": "1180591620717411303425",
    "c_vector": [1.0, 2.5, -3.0],
    "weird col": 42,
    "Größe": 7,
}

#: the Avro form (decoded with the field names given back their CQL spelling)
AVRO_ROW: dict[str, Any] = {
    **JSON_ROW,
    "ck2": {"f0": 7, "f1": "seven"},
    "s_map": [{"key": 1, "value": "a"}, {"key": 2, "value": "b"}],
    "c_blob": b"\x00\xffhi",
    "c_custom": b"\x01\x02",
    "c_decimal": {"unscaled": (-123456789).to_bytes(4, "big", signed=True), "scale": 4},
    "c_double": -math.inf,
    "c_map_list_key": [{"key": [1, 2], "value": 3}],
    "c_map_tuple_key": [{"key": {"f0": 1, "f1": "a"}, "value": "t"}],
    "c_map_uuid": [{"key": "00000000-0000-0000-0000-000000000002", "value": [1, 2]}],
    "c_nested": [[{"key": 1, "value": ["x", "y"]}], []],
    "c_tuple": {"f0": 1, "f1": None, "f2": [1.5, 2.5]},
}

JSON_KEY = {k: JSON_ROW[k] for k in ("pk", "Part 2", "ck1", "ck2")}
AVRO_KEY = {k: AVRO_ROW[k] for k in ("pk", "Part 2", "ck1", "ck2")}


def run(schema: TableSchema, key: Any, ops: list[Operation]) -> list[RowChange]:
    """The changes the operations make, in order, on one partition."""
    builder = EventBuilder(schema)
    state = PartitionState(builder.partition_key(key))
    out: list[RowChange] = []
    for op in ops:
        out.extend(apply_with_changes(state, builder.event(op), schema, NOW)[1])
    return out


def everything_changes() -> list[RowChange]:
    """Insert, update, delete of one row: c, u, then the static-only row's c (static columns stay, and
    the static-only row comes first) and the row's d."""
    return run(
        EVERYTHING,
        PK,
        [
            Write(PK, CK, VALUES, ts=10, insert=True),
            Write(PK, CK, {"c_int": 6, "s_text": "moved"}, ts=11),
            DeleteRow(PK, CK, ts=12),
        ],
    )


def avro_codec() -> tuple[AvroChangeCodec, InMemorySchemaRegistryClient]:
    registry = InMemorySchemaRegistryClient()
    return AvroChangeCodec(registry, "cdc"), registry


# ---------------------------------------------------------------------------------------------------------
# every type, both codecs


def test_every_type_decodes_to_the_python_values_we_map() -> None:
    """The input side of the mapping: what decode_row gives for each type (guards the table above)."""
    created = everything_changes()[0]
    row = change_envelope(created, EVERYTHING, SOURCE, 5)["after"]
    assert row["c_date_far"] == -(2**31) and row["c_ts_far"] == 2**62  # out of Python's range: ints
    assert isinstance(row["c_time"], CqlTime) and isinstance(row["c_duration"], Duration)
    assert row["c_map_list_key"] == [([1, 2], 3)]  # unhashable map keys: pairs
    assert row["c_tuple"] == (1, None, [1.5, 2.5]) and row["c_null"] is None


def test_json_round_trip_of_every_type() -> None:
    codec = JsonChangeCodec()
    created, updated, static_only, deleted = everything_changes()
    env = change_envelope(created, EVERYTHING, SOURCE, 1234)
    decoded = codec.decode_value(codec.encode_value(EVERYTHING, env))
    assert decoded == {
        "before": None,
        "after": JSON_ROW,
        "op": "c",
        "source": SOURCE.as_dict(1234),
        "ts_ms": 1234,
    }
    assert codec.decode_key(codec.encode_key(EVERYTHING, change_key(EVERYTHING, created))) == JSON_KEY

    env = change_envelope(updated, EVERYTHING, SOURCE, 1235)
    decoded = codec.decode_value(codec.encode_value(EVERYTHING, env))
    assert decoded["op"] == "u" and decoded["before"] == JSON_ROW
    assert decoded["after"] == {**JSON_ROW, "c_int": 6, "s_text": "moved"}

    env = change_envelope(deleted, EVERYTHING, SOURCE, 1236)
    decoded = codec.decode_value(codec.encode_value(EVERYTHING, env))
    assert decoded["op"] == "d" and decoded["after"] is None
    assert decoded["before"] == {**JSON_ROW, "c_int": 6, "s_text": "moved"}

    env = change_envelope(static_only, EVERYTHING, SOURCE, 1236)
    decoded = codec.decode_value(codec.encode_value(EVERYTHING, env))
    statics = ("pk", "Part 2", "s_map", "s_text")
    assert decoded["op"] == "c" and decoded["before"] is None
    assert decoded["after"] == {n: (v if n in statics else None) for n, v in JSON_ROW.items()} | {
        "s_text": "moved"
    }


def test_json_value_row_gives_one_row_in_the_json_mapping() -> None:
    row = change_envelope(everything_changes()[0], EVERYTHING, SOURCE, 1)["after"]
    assert json_value_row(EVERYTHING, row) == JSON_ROW
    assert json.loads(json.dumps(json_value_row(EVERYTHING, row), allow_nan=False)) == JSON_ROW


def test_json_key_is_compact_sorted_and_stable() -> None:
    codec = JsonChangeCodec()
    created = everything_changes()[0]
    data = codec.encode_key(EVERYTHING, change_key(EVERYTHING, created))
    assert (
        data == b'{"Part 2":"p2","ck1":1714979289123,"ck2":[7,"seven"],'
        b'"pk":"6ba7b810-9dad-11d1-80b4-00c04fd430c8"}'
    )
    udtkey = table("udtkey")
    one = {"pk": 1, "ck": {"street": "x", "Zip-Code": 2, "tags": ["b", "a"]}}
    other = {"ck": {"tags": ["b", "a"], "Zip-Code": 2, "street": "x"}, "pk": 1}
    assert codec.encode_key(udtkey, one) == codec.encode_key(udtkey, other)
    assert codec.encode_key(udtkey, one) == b'{"ck":{"Zip-Code":2,"street":"x","tags":["b","a"]},"pk":1}'


def test_json_non_finite_floats_are_strings_and_output_is_strict_json() -> None:
    codec = JsonChangeCodec()
    schema = table("simple")
    for value, shown in ((math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity"), (1e300, 1e300)):
        (change,) = run(schema, 1, [Write(1, (), {"v": value}, ts=1, insert=True)])
        data = codec.encode_value(schema, change_envelope(change, schema, SOURCE, 1))
        assert json.loads(data, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
        assert codec.decode_value(data)["after"] == {"id": 1, "v": shown, "w": None}


def test_avro_round_trip_of_every_type() -> None:
    codec, _ = avro_codec()
    created, updated, static_only, deleted = everything_changes()
    env = change_envelope(created, EVERYTHING, SOURCE, 1234)
    decoded = codec.decode_value(codec.encode_value(EVERYTHING, env))
    assert decoded == {
        "before": None,
        "after": AVRO_ROW,
        "op": "c",
        "source": SOURCE.as_dict(1234),
        "ts_ms": 1234,
    }
    assert codec.decode_key(codec.encode_key(EVERYTHING, change_key(EVERYTHING, created))) == AVRO_KEY

    env = change_envelope(updated, EVERYTHING, SOURCE, 1235)
    decoded = codec.decode_value(codec.encode_value(EVERYTHING, env))
    assert decoded["op"] == "u" and decoded["before"] == AVRO_ROW
    assert decoded["after"] == {**AVRO_ROW, "c_int": 6, "s_text": "moved"}

    env = change_envelope(deleted, EVERYTHING, SOURCE, 1236)
    decoded = codec.decode_value(codec.encode_value(EVERYTHING, env))
    assert decoded["op"] == "d" and decoded["after"] is None and decoded["before"]["c_int"] == 6

    env = change_envelope(static_only, EVERYTHING, SOURCE, 1236)
    decoded = codec.decode_value(codec.encode_value(EVERYTHING, env))
    assert decoded["after"]["ck1"] is None and decoded["after"]["ck2"] is None
    assert decoded["after"]["s_map"] == AVRO_ROW["s_map"] and decoded["after"]["c_tuple"] is None


def test_avro_wire_format_and_registered_schemas_read_by_plain_fastavro() -> None:
    """What any Confluent consumer sees: the framing, and the registered schema (with logical types)
    reading the same bytes into UUID/datetime/date objects; fastavro validates the written records."""
    codec, registry = avro_codec()
    created = everything_changes()[0]
    env = change_envelope(created, EVERYTHING, SOURCE, 1234)
    # fastavro's date and timestamp readers stop at Python's years 1..9999 (this codec's decode does not)
    env["after"].update(c_date_far=dt.date(1, 1, 1), c_ts_far=dt.datetime(9999, 1, 1, tzinfo=dt.UTC))
    data = codec.encode_value(EVERYTHING, env)
    key_id, value_id = codec.register(EVERYTHING)
    assert data[:5] == b"\x00" + struct.pack(">I", value_id)
    assert registry.subjects == {"cdc.ks.everything-key": [key_id], "cdc.ks.everything-value": [value_id]}

    registered = parse_schema(registry.get(value_id))
    record = schemaless_reader(io.BytesIO(data[5:]), registered, None)
    after = record["after"]
    assert after["pk"] == PK[0]
    assert after["ck1"] == CK[0]
    assert after["c_date"] == dt.date(2024, 2, 29)
    assert after["c_timestamp"] == dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC)
    assert after["c_uuid"] == uuid.UUID(int=1)
    assert after["_Gr_f6__df_e"] == 7 and after["_weird_20_col"] == 42 and after["__5f_x"] == "underscore"
    assert avro_decimal(after["c_decimal"]) == decimal.Decimal("-12345.6789")

    assert validate(without_branches(codec.value_record(EVERYTHING, env)), registered)
    key_record = without_branches(codec.key_record(EVERYTHING, change_key(EVERYTHING, created)))
    assert validate(key_record, parse_schema(registry.get(key_id)))


def fastavro_bytes(codec: AvroChangeCodec, schema: TableSchema, record: dict[str, Any], key: bool) -> bytes:
    """What fastavro writes for a record with the registered schema (the reference for our writer)."""
    registered = codec.key_schema(schema) if key else codec.value_schema(schema)
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(registered), record)
    return out.getvalue()


def test_avro_writer_writes_what_fastavro_writes() -> None:
    codec, _ = avro_codec()
    for change in everything_changes():
        env = change_envelope(change, EVERYTHING, SOURCE, 2**40)
        expected = fastavro_bytes(codec, EVERYTHING, codec.value_record(EVERYTHING, env), key=False)
        assert codec.encode_value(EVERYTHING, env)[5:] == expected
        key = change_key(EVERYTHING, change)
        expected = fastavro_bytes(codec, EVERYTHING, codec.key_record(EVERYTHING, key), key=True)
        assert codec.encode_key(EVERYTHING, key)[5:] == expected

    env = change_envelope(everything_changes()[0], EVERYTHING, SOURCE, -(2**63))
    extremes = {
        "c_bigint": -(2**63),
        "c_int": 2**31 - 1,
        "c_tinyint": -128,
        "c_smallint": -(2**15),
        "c_text": "x" * 70_000,  # multi-byte length
        "c_list": list(range(-200, 200)),  # multi-byte count, negative and positive varints
        "c_map": {f"k{i}": i * 2**20 for i in range(100)},
        "c_blob": bytes(range(256)) * 3,
        "c_double": math.nan,
        "c_float": -0.0,
        "c_ts_far": 2**63 - 1,
        "c_date_far": 2**31 - 1,
    }
    env["after"].update(extremes)
    env["before"] = dict(env["after"], c_bigint=2**63 - 1, c_int=-(2**31), c_text="", c_list=[], c_map={})
    expected = fastavro_bytes(codec, EVERYTHING, codec.value_record(EVERYTHING, env), key=False)
    assert codec.encode_value(EVERYTHING, env)[5:] == expected


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("c_int", 2**31, "does not fit an Avro int"),
        ("c_bigint", -(2**63) - 1, "does not fit an Avro long"),
        ("c_boolean", 1, "expected a boolean"),
        ("c_blob", "text", "expected bytes"),
        ("c_text", b"bytes", "has no attribute 'encode'"),
        ("c_null", 1.5, "float"),
    ],
)
def test_avro_writer_refuses_values_outside_their_type(column: str, value: Any, message: str) -> None:
    codec, _ = avro_codec()
    env = change_envelope(everything_changes()[0], EVERYTHING, SOURCE, 1)
    env["after"][column] = value
    with pytest.raises(ChangeEncodingError, match=message) as info:
        codec.encode_value(EVERYTHING, env)
    assert info.value.column == column
    with pytest.raises(ChangeEncodingError, match="bad envelope source"):
        codec.encode_value(EVERYTHING, {**env, "after": None, "source": {"cluster": "x"}})


def test_avro_schema_names_and_nullability() -> None:
    codec, _ = avro_codec()
    key = codec.key_schema(EVERYTHING)
    value = codec.value_schema(EVERYTHING)
    assert key["name"] == "cdc.ks.everything.Key"
    assert value["name"] == "cdc.ks.everything.Envelope"
    assert [f["name"] for f in value["fields"]] == ["before", "after", "op", "source", "ts_ms"]
    row = value["fields"][0]["type"][1]
    assert row["name"] == "cdc.ks.everything.Value"
    assert value["fields"][1]["type"] == ["null", "cdc.ks.everything.Value"]
    assert value["fields"][3]["type"]["name"] == "Source"

    fields = {f["cql_name"]: f for f in key["fields"]}
    assert fields["pk"]["type"] == {"type": "string", "logicalType": "uuid"}  # partition key: required
    assert fields["Part 2"]["name"] == "_Part_20_2" and fields["Part 2"]["type"] == "string"
    assert fields["ck1"]["type"] == ["null", {"type": "long", "logicalType": "timestamp-millis"}]
    assert fields["ck2"]["type"][1]["name"] == "cdc.ks.everything.ck2.Tuple"

    fields = {f["cql_name"]: f for f in row["fields"]}
    assert fields["c_time"]["type"] == ["null", "long"] and fields["c_time"]["cql_type"] == "time"
    assert fields["c_date"]["type"] == ["null", {"type": "int", "logicalType": "date"}]
    assert fields["c_decimal"]["type"][1]["name"] == "cdc.change.Decimal"
    assert fields["c_duration"]["type"][1]["name"] == "cdc.change.Duration"
    assert fields["c_udt"]["type"][1]["name"] == "cdc.ks.everything.c_udt.addr"
    assert fields["c_udt_nf"]["type"][1]["name"] == "cdc.ks.everything.c_udt_nf.addr"
    assert fields["c_map"]["type"] == ["null", {"type": "map", "values": "int"}]
    assert fields["c_map_uuid"]["type"][1]["items"]["name"] == "cdc.ks.everything.c_map_uuid.Entry"
    assert fields["c_set_udt"]["type"][1]["items"]["name"] == "cdc.ks.everything.c_set_udt.element.point"
    assert all(
        "default" in f and f["default"] is None for n, f in fields.items() if n not in ("pk", "Part 2")
    )

    names = re.findall(r'"name": "([^"]+)"', json.dumps([key, value]))
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part) for n in names for part in n.split("."))


def test_namespace_defaults_to_the_prefix_made_avro_and_can_be_set() -> None:
    registry = InMemorySchemaRegistryClient()
    assert AvroChangeCodec(registry, "prod.cdc-1").key_schema(EVERYTHING)["name"] == (
        "prod._cdc_2d_1.ks.everything.Key"
    )
    codec = AvroChangeCodec(registry, "prod.cdc-1", namespace="com.example")
    assert codec.value_schema(EVERYTHING)["name"] == "com.example.ks.everything.Envelope"
    assert codec.subjects(EVERYTHING) == ("prod.cdc-1.ks.everything-key", "prod.cdc-1.ks.everything-value")


def test_counter_table_through_both_codecs() -> None:
    schema = table("cnt")
    changes = run(
        schema,
        1,
        [
            CounterShard(1, ("a",), "hits", counter_id=1, clock=1, count=5, ts=10),
            CounterShard(1, ("a",), "misses", counter_id=2, clock=1, count=-2, ts=11),
        ],
    )
    assert [c.op for c in changes] == ["c", "u"]
    env = change_envelope(changes[1], schema, SOURCE, 7)
    assert env["after"] == {"pk": 1, "ck": "a", "hits": 5, "misses": -2}
    json_codec = JsonChangeCodec()
    assert json_codec.decode_value(json_codec.encode_value(schema, env))["after"] == env["after"]
    codec, _ = avro_codec()
    assert codec.decode_value(codec.encode_value(schema, env))["after"] == env["after"]
    row = codec.value_schema(schema)["fields"][0]["type"][1]
    assert {f["name"]: f["type"] for f in row["fields"]}["hits"] == ["null", "long"]


def test_static_only_row_has_null_clustering_in_key_and_images() -> None:
    changes = run(EVERYTHING, PK, [Write(PK, (), {"s_text": "only static"}, ts=10)])
    (change,) = changes
    assert change.op == "c" and change.key is None
    key = change_key(EVERYTHING, change)
    assert key == {"pk": PK[0], "Part 2": "p2", "ck1": None, "ck2": None}
    env = change_envelope(change, EVERYTHING, SOURCE, 1)
    json_codec = JsonChangeCodec()
    assert json_codec.decode_key(json_codec.encode_key(EVERYTHING, key)) == {
        **JSON_KEY,
        "ck1": None,
        "ck2": None,
    }
    after = json_codec.decode_value(json_codec.encode_value(EVERYTHING, env))["after"]
    assert after["s_text"] == "only static" and after["ck1"] is None and after["c_int"] is None
    codec, _ = avro_codec()
    assert codec.decode_key(codec.encode_key(EVERYTHING, key)) == {**AVRO_KEY, "ck1": None, "ck2": None}
    after = codec.decode_value(codec.encode_value(EVERYTHING, env))["after"]
    assert after["s_text"] == "only static" and after["ck2"] is None and after["c_udt"] is None


# ---------------------------------------------------------------------------------------------------------
# scalar conversions and Python fallback forms


def test_decimal_mapping_exact_for_signs_scales_and_byte_boundaries() -> None:
    for text in (
        "0",
        "-0.00",
        "1.50",
        "1E+3",
        "-1E-30",
        "127",
        "128",
        "-128",
        "-129",
        "255",
        "32767",
        "9" * 60,
    ):
        value = decimal.Decimal(text)
        record = decimal_record(value)
        assert (
            avro_decimal(record) == value
            and avro_decimal(record).as_tuple().exponent == value.as_tuple().exponent
        )
        unscaled = int.from_bytes(record["unscaled"], "big", signed=True)
        minimal = (unscaled.bit_length() + 8) // 8 if unscaled >= 0 else ((~unscaled).bit_length() + 8) // 8
        assert len(record["unscaled"]) == minimal, text


def test_fallback_python_forms_of_time_values() -> None:
    """Envelopes built by hand (bootstrap, tests) may carry datetime.time, naive datetimes, str uuids."""
    codec = JsonChangeCodec()
    naive = {"pk": str(PK[0]), "Part 2": "p2", "ck1": dt.datetime(1970, 1, 1, 0, 0, 1), "ck2": (1, "x")}
    assert codec.decode_key(codec.encode_key(EVERYTHING, naive))["ck1"] == 1000
    assert nanos_of_day(dt.time(0, 0, 1, 5)) == 1_000_005_000
    assert nanos_of_day(CqlTime(7)) == 7


# ---------------------------------------------------------------------------------------------------------
# names


def test_avro_names_are_valid_reversible_and_never_collide() -> None:
    assert avro_name("plain_Name1") == "plain_Name1"
    assert avro_name("my-col") == "_my_2d_col"
    assert avro_name("_id") == "__5f_id"
    assert avro_name("1st") == "_1st"
    assert avro_name("a b") == "_a_20_b"
    assert avro_name("Größe") == "_Gr_f6__df_e"
    assert avro_name("") == "_"
    rng = random.Random(7)
    alphabet = "aZ09_-. \"'é✓😀"
    seen: dict[str, str] = {}
    for _ in range(20000):
        name = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
        made = avro_name(name)
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", made), name
        assert cql_name_of(made) == name
        assert seen.setdefault(made, name) == name, f"{name!r} and {seen[made]!r} collide"
    with pytest.raises(ValueError):
        cql_name_of("_a_zz_")


def test_table_with_colliding_looking_names_round_trips() -> None:
    schema = table("names")
    row = {"a-b": 1, "_a_2d_b": 2, "A-B": 3, "a b": 4, "a_b": 5}
    (change,) = run(
        schema, 1, [Write(1, (), {"_a_2d_b": 2, "A-B": 3, "a b": 4, "a_b": 5}, ts=1, insert=True)]
    )
    env = change_envelope(change, schema, SOURCE, 1)
    assert env["after"] == row
    codec, _ = avro_codec()
    fields = [f["name"] for f in codec.value_schema(schema)["fields"][0]["type"][1]["fields"]]
    assert len(set(fields)) == 5
    assert codec.decode_value(codec.encode_value(schema, env))["after"] == row
    assert codec.decode_key(codec.encode_key(schema, {"a-b": 1})) == {"a-b": 1}


# ---------------------------------------------------------------------------------------------------------
# caching, registration and errors


class CountingRegistry(InMemorySchemaRegistryClient):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.fail = False

    def register(self, subject: str, schema_json: str) -> int:
        if self.fail:
            raise SchemaRegistryError(f"registry down for {subject}", url=self.url, subject=subject)
        self.calls.append(subject)
        return super().register(subject, schema_json)


def test_schemas_are_registered_once_per_table_schema_version() -> None:
    registry = CountingRegistry()
    codec = AvroChangeCodec(registry, "cdc")
    schema = table("simple")
    (change,) = run(schema, 1, [Write(1, (), {"v": 1.0}, ts=1, insert=True)])
    env = change_envelope(change, schema, SOURCE, 1)
    for _ in range(3):
        codec.encode_value(schema, env)
        codec.encode_key(schema, change_key(schema, change))
    assert registry.calls == ["cdc.ks.simple-key", "cdc.ks.simple-value"]

    # the same definition reloaded (a new TableSchema object) keeps its ids; an ALTER gets a new value id
    again = load_schema_from_cql(DDL).by_name("ks", "simple")
    altered = load_schema_from_cql(
        "CREATE TABLE ks.simple (id int PRIMARY KEY, v double, w text, x int) "
        "WITH ID = 00000000-0000-0000-0000-0000000000e3;"
    ).by_name("ks", "simple")
    assert again is not None and altered is not None
    ids = codec.register(schema)
    assert codec.register(again) == ids
    new_ids = codec.register(altered)
    assert new_ids[0] == ids[0] and new_ids[1] != ids[1]
    old_bytes = codec.encode_value(schema, env)
    assert codec.decode_value(old_bytes)["after"] == {"id": 1, "v": 1.0, "w": None}


def test_prepare_registers_off_the_loop_then_encoding_needs_no_registry() -> None:
    registry = CountingRegistry()
    codec = AvroChangeCodec(registry, "cdc")
    schema = table("simple")
    asyncio.run(codec.prepare(schema))
    asyncio.run(codec.prepare(schema))
    assert registry.calls == ["cdc.ks.simple-key", "cdc.ks.simple-value"]
    registry.fail = True
    (change,) = run(schema, 1, [Write(1, (), {"w": "x"}, ts=1, insert=True)])
    assert codec.encode_value(schema, change_envelope(change, schema, SOURCE, 1))[0] == 0
    asyncio.run(JsonChangeCodec().prepare(schema))


def test_registry_failure_propagates_and_is_retried_on_next_encode() -> None:
    registry = CountingRegistry()
    registry.fail = True
    codec = AvroChangeCodec(registry, "cdc")
    schema = table("simple")
    with pytest.raises(SchemaRegistryError, match=r"cdc\.ks\.simple-key"):
        codec.encode_key(schema, {"id": 1})
    registry.fail = False
    assert codec.decode_key(codec.encode_key(schema, {"id": 1})) == {"id": 1}


def envelope_with(schema: TableSchema, **after: Any) -> dict[str, Any]:
    (change,) = run(schema, 1, [Write(1, (), {"v": 1.0}, ts=1, insert=True)])
    env = change_envelope(change, schema, SOURCE, 1)
    env["after"].update(after)
    return env


@pytest.mark.parametrize("codec_name", ["json", "avro"])
def test_encoding_errors_name_table_and_column(codec_name: str) -> None:
    codec = JsonChangeCodec() if codec_name == "json" else avro_codec()[0]
    schema = table("simple")
    with pytest.raises(ChangeEncodingError, match=r"ks\.simple\.nope: row columns do not match") as info:
        codec.encode_value(schema, envelope_with(schema, nope=1))
    assert info.value.table == "ks.simple" and info.value.column == "nope"
    env = envelope_with(schema)
    del env["after"]["w"]
    with pytest.raises(ChangeEncodingError, match=r"ks\.simple\.w: .*missing \['w'\]"):
        codec.encode_value(schema, env)
    with pytest.raises(ChangeEncodingError, match="unknown op 'x'"):
        codec.encode_value(schema, {**envelope_with(schema), "op": "x"})

    every = change_envelope(everything_changes()[0], EVERYTHING, SOURCE, 1)
    every["after"]["c_timestamp"] = "yesterday"
    with pytest.raises(ChangeEncodingError, match=r"ks\.everything\.c_timestamp: cannot encode str") as info:
        codec.encode_value(EVERYTHING, every)
    assert info.value.column == "c_timestamp"


def test_avro_rejects_nulls_where_avro_has_none() -> None:
    codec, _ = avro_codec()
    every = change_envelope(everything_changes()[0], EVERYTHING, SOURCE, 1)
    every["after"]["c_list"] = [1, None]
    with pytest.raises(ChangeEncodingError, match=r"ks\.everything\.c_list: .*element is null"):
        codec.encode_value(EVERYTHING, every)
    with pytest.raises(ChangeEncodingError, match=r"ks\.everything\.pk: .*primary key column cannot be null"):
        codec.encode_key(EVERYTHING, {**change_key(EVERYTHING, everything_changes()[0]), "pk": None})
    simple = table("simple")
    with pytest.raises(
        ChangeEncodingError, match=r"ks\.simple\.v: cannot encode str value 'not a double'"
    ) as info:
        codec.encode_value(simple, envelope_with(simple, v="not a double"))
    assert info.value.column == "v"


def test_decoding_errors() -> None:
    codec, _ = avro_codec()
    with pytest.raises(ChangeDecodingError, match="Confluent wire format"):
        codec.decode_value(b"\x01\x00\x00\x00\x01abc")
    with pytest.raises(SchemaRegistryError, match="no schema has id 99"):
        codec.decode_value(b"\x00\x00\x00\x00\x63abc")
    key = codec.encode_key(table("simple"), {"id": 1})
    with pytest.raises(ChangeDecodingError, match="does not decode with schema id"):
        codec.decode_key(key[:5])
    with pytest.raises(ChangeDecodingError, match="not JSON"):
        JsonChangeCodec().decode_value(b"\x00\x01")
    with pytest.raises(ChangeDecodingError, match="not a JSON object"):
        JsonChangeCodec().decode_key(b"[1]")


def test_bad_prefix_or_namespace_is_refused() -> None:
    with pytest.raises(ValueError, match="prefix"):
        AvroChangeCodec(InMemorySchemaRegistryClient(), "bad prefix")
    with pytest.raises(ValueError, match="namespace"):
        AvroChangeCodec(InMemorySchemaRegistryClient(), "cdc", namespace="")


# ---------------------------------------------------------------------------------------------------------
# encode_change: the JSON codec's one-step path writes the envelope path's bytes


def _same_as_envelope_path(
    codec: JsonChangeCodec, schema: TableSchema, change: RowChange, source: ChangeSource
) -> None:
    try:
        expected: tuple[bytes, bytes] | Exception = encode_change_via_envelope(
            codec, schema, change, source, 77
        )
    except Exception as exc:  # the reference path's error is the one to raise
        expected = exc
    if isinstance(expected, Exception):
        with pytest.raises(type(expected), match=re.escape(str(expected))):
            codec.encode_change(schema, change, source, 77)
    else:
        assert codec.encode_change(schema, change, source, 77) == expected


SNAPSHOT = ChangeSource("main", "ks", "everything", None, None, None, None, snapshot=True)


def test_json_encode_change_equals_the_envelope_path_for_every_type() -> None:
    codec = JsonChangeCodec()
    changes = [(EVERYTHING, c) for c in everything_changes()]
    changes += [
        (EVERYTHING, c) for c in run(EVERYTHING, PK, [Write(PK, (), {"s_text": "only static"}, ts=1)])
    ]
    counters = table("cnt")
    changes += [
        (counters, c)
        for c in run(counters, 1, [CounterShard(1, ("a",), "hits", counter_id=1, clock=1, count=5, ts=10)])
    ]
    assert {c.op for _, c in changes} == {"c", "u", "d"}
    for schema, change in changes:
        for source in (SOURCE, SNAPSHOT):
            _same_as_envelope_path(codec, schema, change, source)


def test_json_encode_change_equals_the_envelope_path_for_odd_serialized_values() -> None:
    """Values of every length around the expected one (empty, short, long) and invalid UTF-8: the one-step
    forms take only what they fully understand, and errors are the envelope path's."""
    codec = JsonChangeCodec()
    schema = table("scalars")
    sizes = {"i": 4, "b": 8, "d": 8, "f": 1, "u": 16, "t": 3, "s": 3}
    rng = random.Random(12)
    key = uuid.UUID(int=7)
    for n in range(400):
        values: dict[str, Any] = {}
        for column, size in sizes.items():
            length = rng.choice((0, size - 1, size, size, size, size + 1))
            raw = rng.randbytes(max(length, 0))
            if column == "u" and length == 16:
                raw = uuid.uuid1(node=n).bytes
            values[column] = Raw(raw) if rng.random() < 0.9 else None
        for source in (SOURCE, SNAPSHOT):
            for change in run(
                schema,
                key,
                [Write(key, (dt.datetime(2024, 1, 1, tzinfo=dt.UTC),), values, ts=1, insert=True)],
            ):
                _same_as_envelope_path(codec, schema, change, source)

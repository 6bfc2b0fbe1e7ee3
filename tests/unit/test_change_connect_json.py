"""The json_schema encoding: Kafka Connect's ``{"schema", "payload"}`` records of every CQL type.

A payload that does not fit its own schema is what a Connect sink rejects, so every event is checked
against its schema by the rules of Connect's JsonConverter (``conforms`` below); the Connect worker and
the JDBC sink themselves read these records in tests/integration/test_connect_sink.py.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from cassandra_model.ddl_parser import load_schema_from_cql
from schemas.change_codec import ChangeDecodingError
from schemas.change_connect_json import ConnectJsonChangeCodec, key_schema, source_schema, value_schema
from schemas.change_event import SOURCE_RECORD, ChangeSource, change_envelope, change_key
from schemas.change_json import JsonChangeCodec
from testkit.event_builder import Write
from tests.unit.test_change_codec import (
    EVERYTHING,
    JSON_KEY,
    JSON_ROW,
    PK,
    SNAPSHOT,
    SOURCE,
    everything_changes,
    run,
    table,
)

TOPIC = "cdc.ks.everything"
_INT_RANGES = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
#: the type names Kafka Connect's JsonConverter knows (``Schema.Type``, lower case); anything else is
#: "Unknown schema type" to the sink
CONNECT_TYPES = {
    "int8",
    "int16",
    "int32",
    "int64",
    "float",
    "double",
    "boolean",
    "string",
    "bytes",
    "array",
    "map",
    "struct",
}


def conforms(schema: dict[str, Any], value: Any, where: str = "$") -> None:
    """Assert ``value`` is what Connect's JsonConverter reads as ``schema`` (types, ranges, structs)."""
    kind = schema["type"]
    assert kind in CONNECT_TYPES, f"{where}: {kind!r} is not a Kafka Connect schema type"
    if value is None:
        assert schema["optional"], f"{where}: null for a required {kind}"
        return
    if kind in _INT_RANGES:
        bits = _INT_RANGES[kind]
        assert isinstance(value, int) and not isinstance(value, bool), f"{where}: {value!r} is not an {kind}"
        assert -(2 ** (bits - 1)) <= value < 2 ** (bits - 1), f"{where}: {value} out of {kind}"
    elif kind in ("float", "double"):
        assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{where}: {value!r}"
    elif kind == "boolean":
        assert isinstance(value, bool), f"{where}: {value!r}"
    elif kind == "string":
        assert isinstance(value, str), f"{where}: {value!r}"
    elif kind == "bytes":
        base64.b64decode(value, validate=True)
    elif kind == "array":
        assert isinstance(value, list), f"{where}: {value!r}"
        for i, item in enumerate(value):
            conforms(schema["items"], item, f"{where}[{i}]")
    elif kind == "map":
        if schema["keys"]["type"] == "string":
            assert isinstance(value, dict), f"{where}: {value!r}"
            pairs = list(value.items())
        else:  # JsonConverter writes maps with non-string keys as [[key, value], ...]
            assert isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value)
            pairs = [tuple(p) for p in value]
        for k, v in pairs:
            conforms(schema["keys"], k, f"{where}.key")
            conforms(schema["values"], v, f"{where}[{k!r}]")
    elif kind == "struct":
        assert isinstance(value, dict), f"{where}: {value!r} is not a struct"
        names = [f["field"] for f in schema["fields"]]
        assert sorted(value) == sorted(names), f"{where}: fields {sorted(value)} != {sorted(names)}"
        for field in schema["fields"]:
            conforms(field, value[field["field"]], f"{where}.{field['field']}")
    else:
        pytest.fail(f"{where}: unknown Connect type {kind}")


def _record(data: bytes) -> dict[str, Any]:
    record = json.loads(data)
    assert list(record) == ["schema", "payload"]
    return record


#: the Connect payload of the everything row: the JSON encoding's, tuples made structs
CONNECT_ROW = {
    **JSON_ROW,
    "ck2": {"f0": 7, "f1": "seven"},
    "c_map_tuple_key": [[{"f0": 1, "f1": "a"}, "t"]],
    "c_map_uuid": {"00000000-0000-0000-0000-000000000002": [1, 2]},
    "c_tuple": {"f0": 1, "f1": None, "f2": [1.5, 2.5]},
    "c_double": "-Infinity",
}


def test_every_type_round_trips_and_fits_its_connect_schema() -> None:
    codec = ConnectJsonChangeCodec("cdc")
    created, updated, static_only, deleted = everything_changes()
    for change, ts in ((created, 1), (updated, 2), (static_only, 3), (deleted, 4)):
        env = change_envelope(change, EVERYTHING, SOURCE, ts)
        value = codec.encode_value(EVERYTHING, env)
        key = codec.encode_key(EVERYTHING, change_key(EVERYTHING, change))
        record = _record(value)
        # -Infinity is the one value Connect cannot read (documented): drop it to check the rest
        payload = json.loads(json.dumps(record["payload"]).replace('"-Infinity"', "null"))
        conforms(record["schema"], payload)
        conforms(_record(key)["schema"], _record(key)["payload"])
        assert (key, value) == codec.encode_change(EVERYTHING, change, SOURCE, ts)
    decoded = codec.decode_value(
        codec.encode_value(EVERYTHING, change_envelope(created, EVERYTHING, SOURCE, 9))
    )
    assert decoded == {
        "before": None,
        "after": CONNECT_ROW,
        "op": "c",
        "source": SOURCE.as_dict(9),
        "ts_ms": 9,
    }
    key = codec.decode_key(codec.encode_key(EVERYTHING, change_key(EVERYTHING, created)))
    assert key == {**JSON_KEY, "ck2": {"f0": 7, "f1": "seven"}}


def test_payload_is_the_json_encodings_where_there_are_no_tuples() -> None:
    plain, connect = JsonChangeCodec(), ConnectJsonChangeCodec()
    schema = table("scalars")
    for source in (SOURCE, SNAPSHOT):
        for change in run(
            schema, PK[0], [Write(PK[0], (5,), {"i": 1, "t": "x", "s": "st"}, ts=3, insert=True)]
        ):
            key, value = connect.encode_change(schema, change, source, 8)
            plain_key, plain_value = plain.encode_change(schema, change, source, 8)
            assert _record(value)["payload"] == json.loads(plain_value)
            assert _record(key)["payload"] == json.loads(plain_key)


def test_schema_names_follow_debezium() -> None:
    value = value_schema(TOPIC, EVERYTHING)
    assert value["name"] == "cdc.ks.everything.Envelope" and not value["optional"]
    fields = {f["field"]: f for f in value["fields"]}
    assert list(fields) == ["before", "after", "source", "op", "ts_ms"]
    assert fields["before"]["name"] == fields["after"]["name"] == "cdc.ks.everything.Value"
    assert fields["before"]["optional"] and fields["after"]["optional"]
    assert fields["source"] == {"field": "source", **source_schema()}
    assert (fields["op"]["type"], fields["op"]["optional"]) == ("string", False)
    key = key_schema(TOPIC, EVERYTHING)
    assert key["name"] == "cdc.ks.everything.Key"
    assert [(f["field"], f["optional"]) for f in key["fields"]] == [
        ("pk", False),
        ("Part 2", False),
        ("ck1", True),  # null in the static-only row's key
        ("ck2", True),
    ]
    columns = {f["field"]: f for f in fields["after"]["fields"]}
    assert (columns["c_timestamp"]["name"], columns["c_timestamp"]["type"]) == (
        "org.apache.kafka.connect.data.Timestamp",
        "int64",
    )
    assert (columns["c_date"]["name"], columns["c_date"]["type"]) == (
        "org.apache.kafka.connect.data.Date",
        "int32",
    )
    assert columns["c_uuid"]["name"] == "io.debezium.data.Uuid"
    assert columns["c_time"]["name"] == "io.debezium.time.NanoTime"
    assert columns["c_tuple"]["name"] == "cdc.ks.everything.c_tuple.Tuple"
    assert columns["c_udt"]["name"] == "cdc.ks.everything.c_udt.addr"
    assert columns["c_map_uuid"]["parameters"] == {"cql_type": "map<uuid, frozen<list<int>>>"}
    assert columns["pk"]["optional"] is False and columns["c_int"]["optional"] is True


def test_source_schema_is_made_from_the_shared_source_record() -> None:
    fields = source_schema()["fields"]
    assert [f["field"] for f in fields] == [f["name"] for f in SOURCE_RECORD["fields"]]
    by_name = {f["field"]: (f["type"], f["optional"]) for f in fields}
    assert by_name["ts_ms"] == ("int64", False)
    assert by_name["snapshot"] == ("string", False)
    assert by_name["write_time_us"] == ("int64", True)
    conforms(source_schema(), SOURCE.as_dict(5))
    conforms(source_schema(), ChangeSource("c", "ks", "t", None, None, None, None, snapshot=True).as_dict(5))


def test_keys_stay_byte_equal_when_a_column_is_added() -> None:
    """Log compaction compares key bytes: a new table version must not change the keys of its rows."""
    before = load_schema_from_cql(
        "CREATE TABLE ks.t (id int, ck text, v int, PRIMARY KEY (id, ck)) WITH ID = 00000000-0000-0000-0000-0000000000f1;"
    )
    after = load_schema_from_cql(
        "CREATE TABLE ks.t (id int, ck text, v int, w text, PRIMARY KEY (id, ck)) WITH ID = 00000000-0000-0000-0000-0000000000f1;"
    )
    codec = ConnectJsonChangeCodec("cdc")
    old, new = before.by_name("ks", "t"), after.by_name("ks", "t")
    assert old is not None and new is not None
    assert codec.encode_key(old, {"id": 1, "ck": "a"}) == codec.encode_key(new, {"ck": "a", "id": 1})
    assert codec.encode_value(old, _delete(old)) != codec.encode_value(new, _delete(new))


def _delete(schema: Any) -> dict[str, Any]:
    row = {c.name: None for c in schema.all_columns()} | {"id": 1, "ck": "a"}
    return {"before": row, "after": None, "op": "d", "source": SOURCE.as_dict(1), "ts_ms": 1}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not json", "is not JSON"),
        (b'{"id": 1}', "not Kafka Connect JSON with a schema"),
        (b'{"schema": {}, "payload": [1]}', "payload is not a JSON object"),
    ],
)
def test_decoding_errors_say_what_the_bytes_are_not(data: bytes, message: str) -> None:
    with pytest.raises(ChangeDecodingError, match=message):
        ConnectJsonChangeCodec().decode_value(data)


def test_bad_prefix_is_refused_early() -> None:
    with pytest.raises(ValueError, match="prefix"):
        ConnectJsonChangeCodec("bad prefix")

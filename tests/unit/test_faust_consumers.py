"""consumers/: clean-topic records decoded through Faust's own decode path, for every CQL type and encoding.

Each record is encoded by the worker's codec and decoded by the Faust topic ``change_topic`` builds (its
key and value codecs, its record types, its handling of empty values), as a Faust agent would receive
it. tests/integration/test_faust_consumer.py runs the example application on real clean topics.
"""

from __future__ import annotations

import asyncio
import types
import typing
from typing import Any

import faust
import pytest
from faust.exceptions import ValueDecodeError
from faust.serializers import codecs
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import EventT
from faust.types.tuples import Message

from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.table_schema import TableSchema
from consumers.faust_codec import ChangeEventCodec, change_decoder, register_change_codecs
from consumers.faust_models import (
    ChangeEvent,
    as_dict,
    change_event_model,
    change_topic,
    key_model,
    python_type,
    row_model,
)
from consumers.faust_read_committed import ReadCommittedApp
from schemas.change_avro import AvroChangeCodec
from schemas.change_codec import ChangeCodec
from schemas.change_connect_json import ConnectJsonChangeCodec
from schemas.change_event import change_envelope, envelope_key
from schemas.change_json import JsonChangeCodec
from schemas.registry_client import InMemorySchemaRegistryClient
from tests.unit.test_change_codec import EVERYTHING, SOURCE, everything_changes

TOPIC = "cdc.ks.everything"


def codec_of(encoding: str) -> ChangeCodec:
    if encoding == "avro":
        return AvroChangeCodec(InMemorySchemaRegistryClient())
    return ConnectJsonChangeCodec() if encoding == "json_schema" else JsonChangeCodec()


def records(codec: ChangeCodec, schema: TableSchema = EVERYTHING) -> list[tuple[bytes, bytes]]:
    """Key and value bytes of the c, u, c (static-only row) and d of every-type rows."""
    out = []
    for change in everything_changes():
        envelope = change_envelope(change, schema, SOURCE, 5)
        out.append(
            (codec.encode_key(schema, envelope_key(schema, envelope)), codec.encode_value(schema, envelope))
        )
    return out


def decode(topic: faust.TopicT, key: bytes, value: bytes | None, offset: int = 0) -> EventT:
    message = Message(topic.get_topic_name(), 0, offset, 0.0, 0, None, key, value, None)
    return asyncio.run(topic.decode(message, propagate=True))


def app() -> faust.App:
    return faust.App("faust-consumers-test", autodiscover=False)


def conforms(value: Any, annotation: Any) -> bool:
    """Whether a decoded value has the Python type a generated record annotates its column with."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return any(conforms(value, a) for a in typing.get_args(annotation))
    if annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin is list:
        (item,) = typing.get_args(annotation)
        return isinstance(value, list) and all(conforms(v, item) for v in value)
    if origin is dict:
        key, item = typing.get_args(annotation)
        return isinstance(value, dict) and all(
            conforms(k, key) and conforms(v, item) for k, v in value.items()
        )
    if annotation is float:
        return isinstance(value, float | int) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, annotation)


@pytest.mark.parametrize("encoding", ["json", "json_schema", "avro"])
def test_typed_records_carry_exactly_what_the_codec_decodes(encoding: str) -> None:
    codec = codec_of(encoding)
    topic = change_topic(app(), TOPIC, encoding, schema=EVERYTHING, decoder=codec)
    Row = row_model(EVERYTHING, encoding)
    ops = []
    for offset, (key, value) in enumerate(records(codec)):
        event = decode(topic, key, value, offset)
        change = event.value
        expected = codec.decode_value(value)
        assert isinstance(change, ChangeEvent)
        assert change.op == expected["op"] and change.ts_ms == 5 and change.source == expected["source"]
        for image in ("before", "after"):
            record = getattr(change, image)
            if expected[image] is None:
                assert record is None
                continue
            assert type(record) is Row
            assert record.asdict() == expected[image]  # CQL names, every column, nothing converted
            for column in EVERYTHING.all_columns():
                cell = expected[image][column.name]
                assert cell is None or conforms(cell, python_type(column.type, encoding)), (
                    f"{encoding} {column.name}: {cell!r} is not a {python_type(column.type, encoding)}"
                )
        assert event.key.asdict() == codec.decode_key(key)
        ops.append(change.op)
    assert ops == ["c", "u", "c", "d"]


def test_untyped_topic_gives_dict_keys_and_rows_and_tombstones_as_none() -> None:
    codec = JsonChangeCodec()
    topic = change_topic(app(), TOPIC)
    (key, created), (_, updated), _, (_, deleted) = records(codec)

    event = decode(topic, key, updated)
    assert event.key == codec.decode_key(key) and isinstance(event.key, dict)
    change = event.value
    assert type(change) is ChangeEvent and isinstance(change.after, dict)
    assert change.is_update and not (change.is_create or change.is_delete or change.is_read)
    assert change.changed_columns() == {"c_int", "s_text"}
    assert change.row is change.after and change.write_time_us == SOURCE.write_time_us
    assert not change.is_expiry

    gone = decode(topic, key, deleted).value
    assert gone.is_delete and gone.after is None and gone.row is gone.before
    assert gone.changed_columns() == {name for name, v in gone.before.items() if v is not None}
    assert decode(topic, key, created).value.is_create

    tombstone = decode(topic, key, None)
    assert tombstone.value is None and tombstone.key == codec.decode_key(key)


def test_bytes_that_are_no_change_event_reach_the_stream_as_decode_errors_naming_the_problem() -> None:
    topic = change_topic(app(), TOPIC, "json_schema")
    key, value = records(JsonChangeCodec())[0]  # plain JSON where Kafka Connect JSON is expected
    with pytest.raises(ValueDecodeError, match="not Kafka Connect JSON"):
        decode(topic, records(ConnectJsonChangeCodec())[0][0], value)
    with pytest.raises(ValueDecodeError, match="not JSON"):
        decode(change_topic(app(), TOPIC), key, b"\x00\x00\x00\x00\x01garbage")


def test_codec_registers_by_name_decodes_and_refuses_to_encode() -> None:
    key_name, value_name = register_change_codecs("cdc_test_json", change_decoder("json"))
    assert (key_name, value_name) == ("cdc_test_json_key", "cdc_test_json")
    key, value = records(JsonChangeCodec())[1]
    assert codecs.loads(value_name, value) == JsonChangeCodec().decode_value(value)
    assert codecs.loads(key_name, key) == JsonChangeCodec().decode_key(key)
    chained = ChangeEventCodec(decoder=JsonChangeCodec(), part="value") | codecs.get_codec("binary")
    assert chained.loads(codecs.get_codec("binary").dumps(value))["op"] == "u"  # Faust rebuilt it
    with pytest.raises(NotImplementedError, match="only decodes"):
        codecs.dumps(value_name, {"op": "c"})
    with pytest.raises(ValueError, match="part must be"):
        ChangeEventCodec(decoder=JsonChangeCodec(), part="both")  # type: ignore[arg-type]


def test_decoder_per_encoding_and_its_errors() -> None:
    assert isinstance(change_decoder("json"), JsonChangeCodec)
    assert isinstance(change_decoder("json_schema"), ConnectJsonChangeCodec)
    assert isinstance(change_decoder("avro", "http://127.0.0.1:27999"), AvroChangeCodec)  # no call yet
    with pytest.raises(ValueError, match="schema_registry_url"):
        change_decoder("avro")
    with pytest.raises(ValueError, match="'protobuf' is not one of json, json_schema, avro"):
        change_decoder("protobuf")
    with pytest.raises(ValueError, match="is not one of"):
        row_model(EVERYTHING, "xml")


ODD = load_schema_from_cql(
    'CREATE TABLE ks."order" ("from" int, "Unit Price" decimal, "1st" text, validate int, "__x" int, '
    'asdict text, ok blob, m map<int, text>, t tuple<int, text>, PRIMARY KEY ("from", "1st")) '
    "WITH ID = 00000000-0000-0000-0000-0000000000f1"
).by_name("ks", "order")


def test_column_names_python_cannot_use_get_attributes_of_their_own_and_keep_their_cql_names() -> None:
    assert ODD is not None
    Row = row_model(ODD)
    assert Row.__name__ == "OrderRow" and key_model(ODD).__name__ == "OrderKey"
    data = {"from": 1, "Unit Price": "1.50", "1st": "a", "validate": 2, "__x": 3, "asdict": "x", "ok": "AA=="}
    row = Row.from_data(dict(data), preferred_type=Row)  # Faust renames the keys of what it is given
    assert (row.from_, row.Unit_Price, row.c_1st, row.validate_, row.c___x, row.asdict_, row.ok) == (
        1, "1.50", "a", 2, 3, "x", "AA==",
    )  # fmt: skip
    assert as_dict(row) == row.asdict() == {**data, "m": None, "t": None}  # CQL names again
    assert callable(row.validate) and callable(row.asdict)  # Faust's own methods still work
    # a column added to the table after the model was built is kept; a dropped one reads as None
    later = Row.from_data({"from": 1, "added": 7}, preferred_type=Row)
    assert later.added == 7 and later.Unit_Price is None
    assert as_dict(later)["added"] == 7 and as_dict(later)["Unit Price"] is None


def test_python_types_per_encoding() -> None:
    assert ODD is not None
    types_of = {c.name: c.type for c in ODD.all_columns()}
    assert python_type(types_of["ok"], "json") is str and python_type(types_of["ok"], "avro") is bytes
    assert python_type(types_of["Unit Price"], "json") is str
    assert python_type(types_of["Unit Price"], "avro") == dict[str, Any]
    assert python_type(types_of["m"], "json") == list[list[Any]]
    assert python_type(types_of["m"], "avro") == list[dict[str, Any]]
    assert python_type(types_of["t"], "json") == list[Any]
    assert python_type(types_of["t"], "json_schema") == dict[str, Any]
    Change = change_event_model(ODD, "avro")
    change = Change.from_data(
        {"op": "c", "source": {}, "ts_ms": 1, "after": {"from": 3}}, preferred_type=Change
    )
    assert isinstance(change, ChangeEvent) and change.after.from_ == 3 and change.before is None
    assert type(change.after).__name__ == "OrderRow"


def test_read_committed_app_takes_only_faust_aiokafka_brokers() -> None:
    app = ReadCommittedApp("faust-consumers-rc", broker="kafka://127.0.0.1:27999", autodiscover=False)
    assert isinstance(app.transport, faust_aiokafka.Transport)
    assert app.transport.Consumer._new_consumer_thread is not faust_aiokafka.Consumer._new_consumer_thread
    other = ReadCommittedApp("faust-consumers-rc2", broker="confluent://127.0.0.1:27999", autodiscover=False)
    with pytest.raises(ValueError, match="is not a kafka:// URL"):
        other.transport  # noqa: B018

"""Avro and Kafka Connect JSON change events, decoded and put in the JSON form, are exactly what the JSON
encoding writes for the same change: keys byte for byte, images value for value (every CQL type)."""

from __future__ import annotations

import json

import pytest

from cassandra_model.ddl_parser import load_schema_from_cql
from schemas.change_avro import AvroChangeCodec
from schemas.change_connect_json import ConnectJsonChangeCodec
from schemas.change_event import change_envelope, envelope_key
from schemas.change_json import JsonChangeCodec
from schemas.change_json_form import JsonFormRows
from schemas.registry_client import InMemorySchemaRegistryClient
from tests.unit.test_change_codec import EVERYTHING, SOURCE, everything_changes, table


def _codec(encoding: str) -> AvroChangeCodec | ConnectJsonChangeCodec:
    if encoding == "avro":
        return AvroChangeCodec(InMemorySchemaRegistryClient(), "cdc")
    return ConnectJsonChangeCodec("cdc")


@pytest.mark.parametrize("encoding", ["avro", "json_schema"])
def test_every_type_reads_as_the_json_encoding_wrote_it(encoding: str) -> None:
    codec, json_codec = _codec(encoding), JsonChangeCodec()
    rows = JsonFormRows(EVERYTHING, encoding)
    for change in everything_changes():
        envelope = change_envelope(change, EVERYTHING, SOURCE, 1234)
        key = envelope_key(EVERYTHING, envelope)
        expected_key = json_codec.encode_key(EVERYTHING, key)
        expected = json_codec.decode_value(json_codec.encode_value(EVERYTHING, envelope))
        decoded_key = codec.decode_key(codec.encode_key(EVERYTHING, key))
        decoded = codec.decode_value(codec.encode_value(EVERYTHING, envelope))
        assert rows.key_text(decoded_key).encode() == expected_key
        found = json.loads(rows.envelope_text(decoded))
        assert found == {k: expected[k] for k in ("after", "op", "source", "ts_ms")}


@pytest.mark.parametrize("encoding", ["avro", "json_schema"])
def test_a_record_of_an_older_schema_reads_with_the_newer_columns(encoding: str) -> None:
    """A column added since the record was written is null; one dropped since is left out."""
    older = table("simple")
    (newer,) = load_schema_from_cql(
        "CREATE TABLE ks.simple (id int PRIMARY KEY, v double, x text) "
        "WITH ID = 00000000-0000-0000-0000-0000000000e3;"
    ).tables()
    codec = _codec(encoding)
    envelope = {"before": None, "after": {"id": 1, "v": 2.5, "w": "x"}, "op": "c",
                "source": SOURCE.as_dict(1), "ts_ms": 1}  # fmt: skip
    decoded = codec.decode_value(codec.encode_value(older, envelope))
    after = json.loads(JsonFormRows(newer, encoding).envelope_text(decoded))["after"]
    assert after == {"id": 1, "v": 2.5, "x": None}
    same = json.loads(JsonFormRows(older, encoding).envelope_text(decoded))["after"]
    assert same == {"id": 1, "v": 2.5, "w": "x"}

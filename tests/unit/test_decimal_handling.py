"""``worker.decimal_handling``: a CQL decimal as each encoding writes it under precise, string and double.

A decimal key column stays exact under every mode (two keys a double cannot tell apart would be one row
downstream), and the fast JSON path writes the same bytes as the envelope path.
"""

from __future__ import annotations

import asyncio
import decimal
import json
from typing import Any

import pytest

from cassandra_model.ddl_parser import load_schema_from_cql
from schemas.change_avro import AvroChangeCodec
from schemas.change_avro_reader import avro_decimal
from schemas.change_codec import ChangeCodec, encode_change_via_envelope
from schemas.change_connect_json import ConnectJsonChangeCodec
from schemas.change_event import ChangeSource
from schemas.change_json import JsonChangeCodec
from schemas.registry_client import InMemorySchemaRegistryClient
from state import PartitionState, RowChange, apply_with_changes
from testkit.event_builder import EventBuilder, Write

CATALOG = load_schema_from_cql(
    "CREATE TABLE ks.prices (pk int, ck decimal, price decimal, tags list<decimal>, PRIMARY KEY (pk, ck)) "
    "WITH ID = 00000000-0000-0000-0000-0000000000d1;"
)
PRICES = CATALOG.by_name("ks", "prices")
assert PRICES is not None
SOURCE = ChangeSource("main", "ks", "prices", 1_700_000_000_000_001, "10.0.0.1", 42, 4096)
VALUES = {"price": decimal.Decimal("1E+3"), "tags": [decimal.Decimal("1.50"), decimal.Decimal("-0.001")]}
CK = decimal.Decimal("2.5")


def change() -> RowChange:
    builder = EventBuilder(PRICES)
    state = PartitionState(builder.partition_key(1))
    _, changes = apply_with_changes(state, builder.event(Write(1, (CK,), VALUES, ts=10)), PRICES, 100)
    [created] = changes
    return created


def codec(encoding: str, mode: Any) -> ChangeCodec:
    if encoding == "json":
        return JsonChangeCodec.for_decimals(mode)
    if encoding == "json_schema":
        return ConnectJsonChangeCodec("cdc", decimal_handling=mode)
    avro = AvroChangeCodec(InMemorySchemaRegistryClient(), "cdc", decimal_handling=mode)
    asyncio.run(avro.prepare(PRICES))
    return avro


@pytest.mark.parametrize(
    ("mode", "price", "tags", "key"),
    [
        ("precise", "1E+3", ["1.50", "-0.001"], "2.5"),
        ("string", "1000", ["1.50", "-0.001"], "2.5"),
        ("double", 1000.0, [1.5, -0.001], "2.5"),
    ],
)
@pytest.mark.parametrize("encoding", ["json", "json_schema"])
def test_json_encodings_write_decimals_as_the_mode_says(
    encoding: str, mode: Any, price: Any, tags: list[Any], key: str
) -> None:
    c = codec(encoding, mode)
    key_bytes, value_bytes = c.encode_change(PRICES, change(), SOURCE, 5)
    assert (key_bytes, value_bytes) == encode_change_via_envelope(c, PRICES, change(), SOURCE, 5)
    after = c.decode_value(value_bytes)["after"]
    assert (after["price"], after["tags"], c.decode_key(key_bytes)["ck"]) == (price, tags, key)
    if encoding == "json_schema":
        fields = {f["field"]: f for f in json.loads(value_bytes)["schema"]["fields"][1]["fields"]}
        assert fields["price"]["type"] == ("double" if mode == "double" else "string")
        assert fields["tags"]["items"]["type"] == ("double" if mode == "double" else "string")
        key_fields = {f["field"]: f for f in json.loads(key_bytes)["schema"]["fields"]}
        assert key_fields["ck"]["type"] == "string"  # exact, whatever the mode


@pytest.mark.parametrize(
    ("mode", "avro_type", "price", "key"),
    [
        ("precise", "cdc.change.Decimal", decimal.Decimal("1E+3"), decimal.Decimal("2.5")),
        ("string", "string", "1000", "2.5"),
        ("double", "double", 1000.0, "2.5"),
    ],
)
def test_avro_writes_decimals_as_the_mode_says(mode: Any, avro_type: str, price: Any, key: Any) -> None:
    c = codec("avro", mode)
    assert isinstance(c, AvroChangeCodec)
    key_bytes, value_bytes = c.encode_change(PRICES, change(), SOURCE, 5)
    after = c.decode_value(value_bytes)["after"]
    got_price, got_key = after["price"], c.decode_key(key_bytes)["ck"]
    if mode == "precise":  # the record {unscaled, scale}, exact with its own scale
        got_price, got_key = avro_decimal(got_price), avro_decimal(got_key)
        assert str(got_price) == "1E+3"
    assert (got_price, got_key) == (price, key)
    table = c._table(PRICES)
    price_field = next(
        f for f in table.value_schema["fields"][0]["type"][1]["fields"] if f["name"] == "price"
    )
    branch = price_field["type"][1]
    assert (branch if isinstance(branch, str) else branch["name"]) == avro_type

"""CQL type parsing, commit-log layout facts and value decoding, with cassandra-driver as the oracle.

The driver's serializers are an independent implementation of the native-protocol encodings: every value
is serialized by the driver and must decode back to the same value with our decoder.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import math
import struct
import uuid
from decimal import Decimal
from typing import Any

import pytest
from cassandra import cqltypes as driver
from cassandra import util as driver_util
from cassandra.marshal import uvint_pack, vints_pack

from cassandra_model.cql_types import (
    NATIVE_TYPES,
    CqlTime,
    CqlType,
    CustomType,
    Duration,
    ListType,
    MapType,
    NativeType,
    SetType,
    TupleType,
    UserType,
    VectorType,
    counter_shards,
    parse_cql_type,
    read_signed_vint,
    read_unsigned_vint,
    to_json,
)
from cassandra_model.errors import SchemaError, ValueDecodeError
from cassandra_model.table_schema import UdtRegistry

_DRIVER_NATIVE = {
    "ascii": "AsciiType",
    "bigint": "LongType",
    "blob": "BytesType",
    "boolean": "BooleanType",
    "counter": "CounterColumnType",
    "date": "SimpleDateType",
    "decimal": "DecimalType",
    "double": "DoubleType",
    "duration": "DurationType",
    "float": "FloatType",
    "inet": "InetAddressType",
    "int": "Int32Type",
    "smallint": "ShortType",
    "text": "UTF8Type",
    "time": "TimeType",
    "timestamp": "TimestampType",
    "timeuuid": "TimeUUIDType",
    "tinyint": "ByteType",
    "uuid": "UUIDType",
    "varint": "IntegerType",
}


def driver_type(t: CqlType) -> Any:
    """The cassandra-driver type class equivalent to one of ours (built independently of our decoder)."""
    if isinstance(t, NativeType):
        return driver.lookup_casstype(_DRIVER_NATIVE[t.name])
    if isinstance(t, ListType):
        return driver.ListType.apply_parameters([driver_type(t.element)])
    if isinstance(t, SetType):
        return driver.SetType.apply_parameters([driver_type(t.element)])
    if isinstance(t, MapType):
        return driver.MapType.apply_parameters([driver_type(t.key), driver_type(t.value)])
    if isinstance(t, TupleType):
        return driver.TupleType.apply_parameters([driver_type(e) for e in t.elements])
    if isinstance(t, UserType):
        fields = [driver_type(f) for f in t.field_types]
        return driver.UserType.make_udt_class(t.keyspace, t.name, list(t.field_names), fields)
    if isinstance(t, VectorType):
        return driver.lookup_casstype(
            f"VectorType({driver_type(t.element).cass_parameterized_type()},{t.dimension})"
        )
    raise AssertionError(f"no driver type for {t!r}")


def serialize(t: CqlType, value: Any) -> bytes:
    return driver_type(t).serialize(value, 4)


@pytest.fixture
def udts() -> UdtRegistry:
    registry = UdtRegistry()
    registry.define("ks", "address", ["street", "zip", "tags"], ["text", "int", "frozen<set<text>>"])
    registry.define("ks", "person", ["name", "home", "phones"], ["text", "frozen<address>", "list<text>"])
    registry.define("ks", "Quoted Type", ["x"], ["int"])
    return registry


# ---------------------------------------------------------------------------------------------------------
# parsing


@pytest.mark.parametrize(
    ("text", "canonical", "multi_cell"),
    [
        ("text", "text", False),
        ("VARCHAR", "text", False),
        ("frozen<map<text, frozen<list<int>>>>", "frozen<map<text, frozen<list<int>>>>", False),
        ("map<text,list<int>>", "map<text, frozen<list<int>>>", True),
        ("list<int>", "list<int>", True),
        ("set<frozen<tuple<int, text>>>", "set<frozen<tuple<int, text>>>", True),
        ("tuple<int, text>", "frozen<tuple<int, text>>", False),
        ("frozen<tuple<int, frozen<list<uuid>>>>", "frozen<tuple<int, frozen<list<uuid>>>>", False),
        ("vector<float, 3>", "vector<float, 3>", False),
        ("vector<text,2>", "vector<text, 2>", False),
        ("  frozen < set < timeuuid > >  ", "frozen<set<timeuuid>>", False),
    ],
)
def test_parse_canonical_forms(text: str, canonical: str, multi_cell: bool) -> None:
    t = parse_cql_type(text)
    assert t.cql() == canonical
    assert t.multi_cell is multi_cell
    assert parse_cql_type(t.cql()) == t


def test_fixed_lengths_follow_the_commit_log_rules() -> None:
    # §7.12: smallint/tinyint/date/time and counter are variable in the commit log
    expected = {
        "boolean": 1,
        "int": 4,
        "bigint": 8,
        "timestamp": 8,
        "float": 4,
        "double": 8,
        "uuid": 16,
        "timeuuid": 16,
    }
    for name in _DRIVER_NATIVE:
        assert parse_cql_type(name).fixed_length == expected.get(name), name
    assert parse_cql_type("vector<float, 3>").fixed_length == 12
    assert parse_cql_type("vector<text, 3>").fixed_length is None
    for text in ("frozen<list<int>>", "tuple<int>", "list<int>", "map<int, int>"):
        assert parse_cql_type(text).fixed_length is None


def test_user_types_resolve_nest_and_freeze(udts: UdtRegistry) -> None:
    person = parse_cql_type("person", keyspace="ks", udts=udts)
    assert isinstance(person, UserType) and person.multi_cell
    assert person.field_names == ("name", "home", "phones")
    assert person.field_types[1].cql() == "frozen<address>"
    assert not person.field_types[2].multi_cell  # fields are always frozen
    frozen = parse_cql_type("frozen<ks.person>", udts=udts)
    assert not frozen.multi_cell and frozen.cql() == "frozen<person>"
    quoted = parse_cql_type('"Quoted Type"', keyspace="ks", udts=udts)
    assert quoted.cql() == '"Quoted Type"'
    assert parse_cql_type(quoted.cql(), keyspace="ks", udts=udts) == quoted


def test_unknown_user_type_and_garbage_are_schema_errors(udts: UdtRegistry) -> None:
    with pytest.raises(SchemaError, match="nosuch"):
        parse_cql_type("frozen<nosuch>", keyspace="ks", udts=udts)
    with pytest.raises(SchemaError, match="nosuch"):
        parse_cql_type("list<nosuch>")
    for bad in ("map<text>", "list<int", "vector<float, x>", "int int", "<>", "frozen<", "tuple<>", ""):
        with pytest.raises(SchemaError):
            parse_cql_type(bad)


def test_self_referencing_user_type_is_a_schema_error() -> None:
    registry = UdtRegistry()
    registry.define("ks", "loop", ["next"], ["frozen<loop>"])
    with pytest.raises(SchemaError, match="itself"):
        registry.resolve_udt("ks", "loop")


def test_custom_java_class_types() -> None:
    assert parse_cql_type("'org.apache.cassandra.db.marshal.DateType'") is NATIVE_TYPES["timestamp"]
    assert parse_cql_type("'org.apache.cassandra.db.marshal.LexicalUUIDType'").fixed_length == 16
    custom = parse_cql_type("'com.example.PointType'")
    assert isinstance(custom, CustomType) and custom.fixed_length is None
    assert custom.decode(b"\x01\x02") == b"\x01\x02"
    assert custom.cql() == "'com.example.PointType'"


def test_dropped_non_frozen_tuple_is_multi_cell_only_when_asked() -> None:
    assert not parse_cql_type("tuple<int, text>").multi_cell
    dropped = parse_cql_type("tuple<int, text>", multi_cell_tuples=True)
    assert dropped.multi_cell
    assert dropped.decode_path(b"\x00\x01") == 1
    assert dropped.decode_cell_value(b"\x00\x01", b"abc") == "abc"


# ---------------------------------------------------------------------------------------------------------
# decoding: driver round trips


def _same(ours: Any, expected: Any) -> bool:
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(ours, float) and math.isnan(ours)
    if isinstance(expected, Decimal):
        return isinstance(ours, Decimal) and str(ours) == str(expected)
    return type(ours) is type(expected) and ours == expected


_UTC = dt.UTC
_T1 = uuid.UUID("657e5210-7cbb-11ee-9858-c9aa1eb53e69")
_U4 = uuid.UUID("0e8b6c02-3c5c-4e6b-9a84-6a2f7e0b9f55")

# (type, value given to the driver's serializer, value our decoder must return; ... = the same)
ROUND_TRIPS: list[tuple[str, Any, Any]] = [
    ("ascii", "", ...),
    ("ascii", "plain \x00\x7f", ...),
    ("text", "", ...),
    ("text", "héllo ✓ 𝄞", ...),
    ("varchar", "x" * 1000, ...),
    ("blob", b"", ...),
    ("blob", bytes(range(256)), ...),
    ("boolean", True, ...),
    ("boolean", False, ...),
    ("tinyint", -128, ...),
    ("tinyint", -1, ...),
    ("tinyint", 127, ...),
    ("smallint", -32768, ...),
    ("smallint", 32767, ...),
    ("int", -(2**31), ...),
    ("int", 0, ...),
    ("int", 2**31 - 1, ...),
    ("bigint", -(2**63), ...),
    ("bigint", 2**63 - 1, ...),
    ("counter", -42, ...),
    ("varint", 0, ...),
    ("varint", -1, ...),
    ("varint", 127, ...),
    ("varint", 128, ...),
    ("varint", -128, ...),
    ("varint", -129, ...),
    ("varint", 2**64, ...),
    ("varint", -(2**521) + 3, ...),
    ("varint", 10**400, ...),
    ("float", 1.5, ...),
    ("float", -0.0, ...),
    ("float", float("inf"), ...),
    ("float", float("nan"), ...),
    ("float", 3.4028234663852886e38, ...),
    ("double", 5e-324, ...),
    ("double", -1.7976931348623157e308, ...),
    ("double", float("-inf"), ...),
    ("decimal", Decimal("0"), ...),
    ("decimal", Decimal("-1.50"), ...),
    ("decimal", Decimal("1E-30"), ...),
    ("decimal", Decimal("1E+50"), ...),
    ("decimal", Decimal("-123456789012345678901234567890.123456789012345678901234567890"), ...),
    ("decimal", Decimal("9" * 200 + "E-2147483647"), ...),
    ("date", dt.date(1970, 1, 1), ...),
    ("date", dt.date(1, 1, 1), ...),
    ("date", dt.date(9999, 12, 31), ...),
    ("date", 0, -(2**31)),  # the driver takes an int as the raw unsigned value: out of Python's range
    ("date", 2**32 - 1, 2**31 - 1),
    ("time", 0, CqlTime(0)),
    ("time", 86_399_999_999_999, CqlTime(86_399_999_999_999)),
    ("time", driver_util.Time("13:14:15.123456789"), CqlTime(47_655_123_456_789)),
    ("timestamp", dt.datetime(1970, 1, 1, tzinfo=_UTC), ...),
    ("timestamp", dt.datetime(2023, 11, 6, 15, 44, 40, 44000, tzinfo=_UTC), ...),
    ("timestamp", dt.datetime(1900, 1, 1, tzinfo=_UTC), ...),
    ("timestamp", dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=_UTC), ...),
    ("uuid", _U4, ...),
    ("timeuuid", _T1, ...),
    ("inet", "127.0.0.1", ipaddress.IPv4Address("127.0.0.1")),
    ("inet", "::1", ipaddress.IPv6Address("::1")),
    ("inet", "2001:db8::ff00:42:8329", ipaddress.IPv6Address("2001:db8::ff00:42:8329")),
    ("duration", driver_util.Duration(1, 2, 3), Duration(1, 2, 3)),
    ("duration", driver_util.Duration(-1, -2, -3), Duration(-1, -2, -3)),
    (
        "duration",
        driver_util.Duration(2**31 - 1, -(2**31), 2**63 - 1),
        Duration(2**31 - 1, -(2**31), 2**63 - 1),
    ),
    ("frozen<list<int>>", [], ...),
    ("frozen<list<int>>", [1, -2, 3], ...),
    ("list<text>", ["a", "", "ü"], ...),
    ("frozen<set<text>>", ["a", "b"], ...),
    ("set<int>", [-5, 0, 7], ...),
    ("frozen<map<text, int>>", {"a": 1, "b": -1}, ...),
    ("map<int, text>", {1: "x", 2: ""}, ...),
    ("frozen<map<text, frozen<list<int>>>>", {"k": [1, 2], "l": []}, ...),
    ("list<frozen<set<bigint>>>", [[1, 2], []], ...),
    ("map<frozen<tuple<int, text>>, boolean>", {(1, "a"): True}, ...),
    ("frozen<map<timeuuid, frozen<map<text, double>>>>", {_T1: {"x": 0.5}}, ...),
    ("tuple<int, text, boolean>", (1, "a", True), ...),
    ("tuple<int, text, boolean>", (None, None, None), ...),
    (
        "tuple<frozen<list<int>>, frozen<tuple<uuid, inet>>>",
        ([1], (_U4, "10.0.0.1")),
        ([1], (_U4, ipaddress.ip_address("10.0.0.1"))),
    ),
    ("vector<float, 3>", [1.0, 2.5, -3.0], ...),
    ("vector<bigint, 2>", [2**62, -1], ...),
    ("vector<text, 3>", ["a", "", "bcd"], ...),
    ("vector<frozen<list<int>>, 2>", [[1], [2, 3]], ...),
]


@pytest.mark.parametrize(("text", "given", "expected"), ROUND_TRIPS)
def test_every_type_round_trips_through_the_driver_serializer(text: str, given: Any, expected: Any) -> None:
    t = parse_cql_type(text)
    expected = given if expected is ... else expected
    decoded = t.decode(serialize(t, given))
    if isinstance(expected, list | tuple | dict):
        assert decoded == expected
        assert type(decoded) is type(expected)
    else:
        assert _same(decoded, expected), (decoded, expected)


def test_decoding_agrees_with_the_driver_deserializer_on_collections() -> None:
    t = parse_cql_type("frozen<map<text, frozen<set<int>>>>")
    raw = serialize(t, {"b": {3, 1}, "a": set()})
    ours = t.decode(raw)
    theirs = driver_type(t).deserialize(raw, 4)
    assert list(ours) == list(theirs)
    assert {k: set(v) for k, v in ours.items()} == {k: set(v) for k, v in theirs.items()}


def test_user_types_round_trip(udts: UdtRegistry) -> None:
    address = parse_cql_type("frozen<address>", keyspace="ks", udts=udts)
    raw = serialize(address, ("Main St", 12345, ["home", "work"]))
    assert address.decode(raw) == {"street": "Main St", "zip": 12345, "tags": ["home", "work"]}
    person = parse_cql_type("frozen<person>", keyspace="ks", udts=udts)
    raw = serialize(person, ("Ann", ("x", None, None), ["1", "2"]))
    assert person.decode(raw) == {
        "name": "Ann",
        "home": {"street": "x", "zip": None, "tags": None},
        "phones": ["1", "2"],
    }
    # a value written before ALTER TYPE ADD has fewer fields: the missing ones are null
    assert address.decode(struct.pack(">i", 1) + b"x") == {"street": "x", "zip": None, "tags": None}


def test_empty_values() -> None:
    for name in (
        "int",
        "bigint",
        "varint",
        "uuid",
        "timestamp",
        "boolean",
        "double",
        "inet",
        "date",
        "decimal",
    ):
        assert parse_cql_type(name).decode(b"") is None, name
    assert parse_cql_type("text").decode(b"") == ""
    assert parse_cql_type("ascii").decode(b"") == ""
    assert parse_cql_type("blob").decode(b"") == b""
    assert parse_cql_type("frozen<list<int>>").decode(b"") is None
    assert parse_cql_type("frozen<list<int>>").decode(struct.pack(">i", 0)) == []


def test_out_of_python_range_timestamps_stay_integers() -> None:
    t = parse_cql_type("timestamp")
    assert t.decode(struct.pack(">q", 2**63 - 1)) == 2**63 - 1
    assert t.decode(struct.pack(">q", -(2**63))) == -(2**63)


@pytest.mark.parametrize(
    ("text", "raw"),
    [
        ("int", b"\x00\x01"),
        ("bigint", b"\x00" * 9),
        ("boolean", b"\x00\x00"),
        ("uuid", b"\x00" * 15),
        ("inet", b"\x00" * 5),
        ("time", struct.pack(">q", -1)),
        ("decimal", b"\x00\x00\x00"),
        ("text", b"\xff\xfe"),
        ("ascii", "é".encode()),
        ("frozen<list<int>>", struct.pack(">ii", 2, 4) + b"\x00\x00\x00\x01"),
        ("frozen<list<int>>", struct.pack(">i", 0) + b"extra"),
        ("frozen<map<int, int>>", struct.pack(">i", -1)),
        ("tuple<int>", struct.pack(">i", 4) + b"\x00" * 4 + struct.pack(">i", 4) + b"\x00" * 4),
        ("vector<float, 2>", b"\x00" * 4),
        ("vector<text, 2>", b"\x01a"),
        ("duration", b"\x00\x00"),
        ("counter", b"\x00\x01\x00"),
    ],
)
def test_malformed_values_raise_value_decode_errors(text: str, raw: bytes) -> None:
    with pytest.raises(ValueDecodeError, match="cannot decode"):
        parse_cql_type(text).decode(raw)


# ---------------------------------------------------------------------------------------------------------
# counters, vints


def _counter_context(shards: list[tuple[uuid.UUID, int, int]], global_shards: int = 1) -> bytes:
    header = struct.pack(">h", global_shards) + b"".join(
        struct.pack(">h", -(2**15) + i) for i in range(global_shards)
    )
    return header + b"".join(cid.bytes + struct.pack(">qq", clock, count) for cid, clock, count in shards)


def test_counter_context_value_is_the_sum_of_shard_counts() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    raw = _counter_context([(a, 3, 10), (b, 7, -3)], global_shards=2)
    counter = parse_cql_type("counter")
    assert counter.decode(raw) == 7
    assert [s.count for s in counter_shards(raw)] == [10, -3]
    assert counter_shards(raw)[0].counter_id == a
    assert counter.decode(_counter_context([])) == 0
    assert counter.decode(serialize(counter, 2**40)) == 2**40  # a plain bigint is accepted too


@pytest.mark.parametrize(
    "value",
    [0, 1, 127, 128, 2**14 - 1, 2**14, 2**21, 2**28, 2**35, 2**42, 2**49, 2**56 - 1, 2**56, 2**64 - 1],
)
def test_unsigned_vint_reader_matches_the_driver_encoding(value: int) -> None:
    encoded = uvint_pack(value)
    assert read_unsigned_vint(b"\x07" + encoded + b"\x09", 1) == (value, 1 + len(encoded))


@pytest.mark.parametrize("value", [0, -1, 1, -(2**31), 2**63 - 1, -(2**63)])
def test_signed_vint_reader_matches_the_driver_encoding(value: int) -> None:
    encoded = vints_pack([value])
    assert read_signed_vint(encoded, 0) == (value, len(encoded))


def test_truncated_vint_raises_index_error() -> None:
    with pytest.raises(IndexError):
        read_unsigned_vint(b"\xc0\x01", 0)


# ---------------------------------------------------------------------------------------------------------
# complex-cell elements


def test_non_frozen_collection_cells(udts: UdtRegistry) -> None:
    lst = parse_cql_type("list<int>")
    assert lst.decode_path(_T1.bytes) == _T1
    assert lst.decode_cell_value(_T1.bytes, struct.pack(">i", 5)) == 5
    st = parse_cql_type("set<text>")
    assert st.decode_path(b"abc") == "abc"
    assert st.decode_cell_value(b"abc", b"") is None
    mp = parse_cql_type("map<int, frozen<list<text>>>")
    assert mp.decode_path(struct.pack(">i", 9)) == 9
    assert mp.decode_cell_value(b"", serialize(parse_cql_type("frozen<list<text>>"), ["q"])) == ["q"]
    assert mp.assemble([(struct.pack(">i", 1), struct.pack(">ii", 1, 1) + b"a")]) == {1: ["a"]}
    person = parse_cql_type("person", keyspace="ks", udts=udts)
    assert person.decode_path(b"\x00\x02") == "phones"
    assert person.decode_cell_value(b"\x00\x00", b"Bob") == "Bob"
    assert person.assemble([(b"\x00\x00", b"Bob")]) == {"name": "Bob", "home": None, "phones": None}
    with pytest.raises(ValueDecodeError):
        person.decode_path(b"\x00\x07")
    with pytest.raises(ValueDecodeError):
        lst.decode_path(b"short")
    with pytest.raises(ValueDecodeError):
        parse_cql_type("int").decode_path(b"")


# ---------------------------------------------------------------------------------------------------------
# JSON rendering


def test_json_rendering() -> None:
    cases: list[tuple[str, Any, Any]] = [
        ("uuid", _U4, str(_U4)),
        ("blob", b"\x00\xab", "00ab"),
        ("decimal", Decimal("-1.50"), "-1.50"),
        ("date", dt.date(2024, 2, 29), "2024-02-29"),
        ("date", -(2**31), -(2**31)),
        ("time", CqlTime(3_723_000_000_001), "01:02:03.000000001"),
        ("timestamp", dt.datetime(2023, 11, 6, 15, 44, 40, 44000, tzinfo=_UTC), "2023-11-06T15:44:40.044Z"),
        ("duration", Duration(1, -2, 3), {"months": 1, "days": -2, "nanoseconds": 3}),
        ("inet", ipaddress.ip_address("::1"), "::1"),
        ("double", float("nan"), "NaN"),
        ("float", float("-inf"), "-Infinity"),
        ("frozen<set<int>>", [1, 2], [1, 2]),
        ("frozen<set<int>>", {3, 1, 2}, [1, 2, 3]),
        ("frozen<map<text, blob>>", {"a": b"\x01"}, {"a": "01"}),
        ("frozen<map<int, text>>", {1: "a"}, [[1, "a"]]),
        ("frozen<map<uuid, int>>", {_U4: 1}, [[str(_U4), 1]]),
        ("frozen<tuple<int, blob>>", (1, b"\x02"), [1, "02"]),
        ("vector<float, 2>", [1.0, 2.0], [1.0, 2.0]),
    ]
    for text, value, expected in cases:
        rendered = to_json(value, parse_cql_type(text))
        assert rendered == expected, text
        json.dumps(rendered, allow_nan=False)


def test_json_rendering_of_user_types(udts: UdtRegistry) -> None:
    person = parse_cql_type("frozen<person>", keyspace="ks", udts=udts)
    value = {"name": "A", "home": {"street": "s", "zip": 1, "tags": ["t"]}, "phones": None}
    assert to_json(value, person) == value
    assert to_json(value) == value  # without the type: a dict with string keys is an object

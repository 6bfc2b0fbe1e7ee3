"""Canonical forms: values that compare equal get one serialized form, and nothing else changes.

For every type whose equal values can differ in bytes: spellings of one value share one canonical form,
the form orders exactly as the value (its order encoding is the input's), applying it twice changes
nothing, and random pools of values are split into the same classes by the canonical form as by the
order. Byte-identical types have no form and keep their bytes.
"""

from __future__ import annotations

import datetime as dt
import random
import struct
import uuid
from decimal import Decimal
from typing import Any

import pytest

from cassandra_model.clustering_order import ClusteringKeyOrder
from cassandra_model.cql_types import CqlType, parse_cql_type
from cassandra_model.cql_types.canonical_forms import MAX_PLAIN_DIGITS
from cassandra_model.errors import ClusteringValueError
from cassandra_model.value_serializer import serialize
from testkit.event_builder import Raw


def t(cql: str) -> CqlType:
    return parse_cql_type(cql)


def dec(scale: int, unscaled: int) -> bytes:
    """A decimal's bytes from its parts (the driver writes one spelling only)."""
    size = (unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()) // 8 + 1
    return struct.pack(">i", scale) + unscaled.to_bytes(size, "big", signed=True)


def padded_varint(value: int, extra: int) -> bytes:
    """A varint with ``extra`` redundant sign bytes in front."""
    minimal = serialize(t("varint"), value)
    return (b"\xff" if value < 0 else b"\x00") * extra + minimal


NAN_PAYLOADS = {
    "float": [bytes.fromhex(h) for h in ("7fc00000", "7f800001", "ffc00000", "ff812345")],
    "double": [bytes.fromhex(h) for h in ("7ff8000000000000", "7ff0000000000001", "fff8000000000000")],
}

#: (type, [spellings of one value], its canonical form)
SAME_VALUE: list[tuple[str, list[bytes], bytes]] = [
    ("decimal", [dec(1, 10), dec(2, 100), dec(0, 1), dec(5, 100000)], dec(0, 1)),
    ("decimal", [dec(2, 150), dec(1, 15), dec(6, 1500000)], dec(1, 15)),
    ("decimal", [dec(0, 100), dec(-2, 1), dec(-1, 10), dec(3, 100000)], dec(0, 100)),
    ("decimal", [dec(0, 0), dec(7, 0), dec(-3, 0)], dec(0, 0)),
    ("decimal", [dec(3, -1230), dec(2, -123)], dec(2, -123)),
    ("decimal", [dec(-50, 1), dec(-49, 10)], dec(-50, 1)),  # 51 digits: keeps its exponent
    ("decimal", [dec(-37, 1), dec(0, 10**37)], dec(0, 10**37)),  # 38 digits: plain
    ("decimal", [dec(-(2**31), 10), dec(-(2**31) + 1, 100)], dec(-(2**31), 10)),  # the int32 floor
    ("varint", [padded_varint(7, 0), padded_varint(7, 1), padded_varint(7, 3)], b"\x07"),
    ("varint", [padded_varint(-128, 0), padded_varint(-128, 2)], b"\x80"),
    ("varint", [padded_varint(128, 0), padded_varint(128, 1)], b"\x00\x80"),
    ("varint", [b"\x00", b"\x00\x00", b"\x00\x00\x00"], b"\x00"),
    ("boolean", [b"\x01", b"\x02", b"\xff"], b"\x01"),
    ("float", NAN_PAYLOADS["float"], bytes.fromhex("7fc00000")),
    ("double", NAN_PAYLOADS["double"], bytes.fromhex("7ff8000000000000")),
    (
        "frozen<list<decimal>>",
        [
            serialize(t("frozen<list<decimal>>"), [Raw(dec(1, 10)), Raw(dec(2, 250))]),
            serialize(t("frozen<list<decimal>>"), [Raw(dec(0, 1)), Raw(dec(1, 25))]),
        ],
        serialize(t("frozen<list<decimal>>"), [Raw(dec(0, 1)), Raw(dec(1, 25))]),
    ),
    (
        "frozen<map<varint, decimal>>",
        [serialize(t("frozen<map<varint, decimal>>"), {Raw(padded_varint(5, 2)): Raw(dec(3, 2000))})],
        serialize(t("frozen<map<varint, decimal>>"), {5: Raw(dec(0, 2))}),
    ),
    (
        "frozen<tuple<decimal, int, text>>",
        [
            serialize(t("frozen<tuple<decimal, int, text>>"), (Raw(dec(2, 300)), None, None)),
            serialize(t("frozen<tuple<decimal, int>>"), (Raw(dec(1, 30)), None)),
            serialize(t("frozen<tuple<decimal>>"), (Raw(dec(0, 3)),)),
        ],
        serialize(t("frozen<tuple<decimal>>"), (Raw(dec(0, 3)),)),
    ),
    (
        "frozen<tuple<int, int>>",  # all fields null: one null field kept, it is not the empty value
        [b"\xff\xff\xff\xff", b"\xff\xff\xff\xff" * 2],
        b"\xff\xff\xff\xff",
    ),
    (
        "vector<double, 2>",
        [
            NAN_PAYLOADS["double"][1] + struct.pack(">d", 1.5),
            NAN_PAYLOADS["double"][2] + struct.pack(">d", 1.5),
        ],
        NAN_PAYLOADS["double"][0] + struct.pack(">d", 1.5),
    ),
    (
        "vector<varint, 2>",
        [b"\x02\x00\x05\x01\x07", b"\x01\x05\x03\x00\x00\x07"],
        b"\x01\x05\x01\x07",
    ),
]


@pytest.mark.parametrize(("cql", "spellings", "canonical"), SAME_VALUE, ids=[c for c, _, _ in SAME_VALUE])
def test_spellings_of_one_value_share_its_canonical_form(
    cql: str, spellings: list[bytes], canonical: bytes
) -> None:
    cql_type = t(cql)
    order = cql_type.order_encoder()
    assert not cql_type.byte_identical and cql_type.canonical_form() is not None
    for spelling in spellings:
        assert order(spelling) == order(canonical), f"{spelling.hex()} is not the same value"
        assert cql_type.canonical(spelling) == canonical, spelling.hex()
        assert cql_type.canonical(canonical) == canonical


def test_decimals_read_as_plain_digits_without_trailing_zeros() -> None:
    decimal = t("decimal")
    cases = {"1.00": "1", "1.50": "1.5", "-0.0100": "-0.01", "0.000": "0", "100": "100", "1E+2": "100",
             "2.5E+3": "2500", "1E-7": "1E-7", "123.4560": "123.456"}  # fmt: skip
    for text, expected in cases.items():
        assert str(decimal.decode(decimal.canonical(serialize(decimal, Decimal(text))))) == expected, text
    big = decimal.decode(decimal.canonical(dec(-MAX_PLAIN_DIGITS, 1)))
    assert str(big) == "1E+38", "more than MAX_PLAIN_DIGITS digits: the exponent stays"


def test_the_sign_of_zero_stays_since_cassandra_orders_it() -> None:
    for cql, size in (("float", ">f"), ("double", ">d")):
        positive, negative = struct.pack(size, 0.0), struct.pack(size, -0.0)
        assert t(cql).canonical(negative) == negative != t(cql).canonical(positive)


@pytest.mark.parametrize(
    "cql",
    ["int", "text", "blob", "uuid", "timeuuid", "timestamp", "frozen<list<int>>", "frozen<map<text, uuid>>"],
)
def test_byte_identical_types_have_no_canonical_form(cql: str) -> None:
    cql_type = t(cql)
    assert cql_type.byte_identical and cql_type.canonical_form() is None
    value = b"\x00\x00\x00\x01" if cql in ("int",) else serialize(cql_type, _sample(cql))
    assert cql_type.canonical(value) is value


def _sample(cql: str) -> Any:
    return {
        "text": "x",
        "blob": b"\x00",
        "uuid": uuid.UUID(int=5),
        "timeuuid": uuid.UUID("d2177dd0-eaa2-11de-a572-001b779c76e3"),
        "timestamp": dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
        "frozen<list<int>>": [1, 2],
        "frozen<map<text, uuid>>": {"a": uuid.UUID(int=1)},
    }[cql]


def test_an_empty_value_stays_empty_and_bad_bytes_are_refused() -> None:
    assert t("decimal").canonical(b"") == b""
    with pytest.raises(ClusteringValueError, match="decimal"):
        t("decimal").canonical(b"\x00\x01")
    with pytest.raises(ClusteringValueError):
        t("frozen<list<varint>>").canonical(b"\x00\x00\x00\x02\x00\x00\x00\x01\x05")


def _random_spelling(rng: random.Random, cql: str) -> bytes:
    """A random value of a small domain (so equal values recur) in a random spelling."""
    if cql == "decimal":
        unscaled, scale = rng.randint(-30, 30), rng.randint(-3, 3)
        pad = rng.randint(0, 3)
        return dec(scale + pad, unscaled * 10**pad)
    if cql == "varint":
        return padded_varint(rng.randint(-300, 300), rng.randint(0, 2))
    if cql == "double":
        if rng.random() < 0.2:
            return rng.choice(NAN_PAYLOADS["double"])
        return struct.pack(">d", rng.choice([0.0, -0.0, 1.5, -2.0, float("inf")]))
    if cql == "frozen<tuple<decimal, varint>>":
        fields = [_random_spelling(rng, "decimal"), _random_spelling(rng, "varint")]
        fields = [None if rng.random() < 0.3 else f for f in fields]
        return serialize(
            t("frozen<tuple<decimal, varint>>"), tuple(None if f is None else Raw(f) for f in fields)
        )
    if cql == "frozen<set<decimal>>":
        values: dict[bytes, bytes] = {}
        for _ in range(rng.randint(0, 3)):
            spelling = _random_spelling(rng, "decimal")
            values.setdefault(t("decimal").order_encoder()(spelling), spelling)
        ordered = [values[k] for k in sorted(values)]
        return serialize(t("frozen<list<decimal>>"), [Raw(v) for v in ordered])  # a set's frame, sorted
    raise AssertionError(cql)


@pytest.mark.parametrize(
    "cql", ["decimal", "varint", "double", "frozen<tuple<decimal, varint>>", "frozen<set<decimal>>"]
)
def test_canonical_forms_split_random_values_exactly_as_the_order_does(cql: str) -> None:
    rng = random.Random(cql)
    cql_type = t(cql)
    order = cql_type.order_encoder()
    pool = [_random_spelling(rng, cql) for _ in range(400)]
    canonical = {value: cql_type.canonical(value) for value in pool}
    for value in pool:
        assert order(canonical[value]) == order(value), value.hex()
        assert cql_type.canonical(canonical[value]) == canonical[value], "not idempotent"
    for a, b in zip(pool, rng.sample(pool, len(pool)), strict=True):
        assert (canonical[a] == canonical[b]) == (order(a) == order(b)), (a.hex(), b.hex())


def test_a_clustering_is_made_canonical_column_by_column_and_left_alone_when_it_cannot_vary() -> None:
    mixed = ClusteringKeyOrder([(t("int"), False), (t("decimal"), True), (t("text"), False)])
    clustering = (b"\x00\x00\x00\x01", dec(2, 100), b"x")
    assert mixed.canonical(clustering) == (b"\x00\x00\x00\x01", dec(0, 1), b"x")
    assert mixed.canonical((None, b"", b"x")) == (None, b"", b"x"), "null and empty stay"
    plain = ClusteringKeyOrder([(t("int"), False), (t("text"), True)])
    same = (b"\x00\x00\x00\x01", b"y")
    assert plain.canonical(same) is same

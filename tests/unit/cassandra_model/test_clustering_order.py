"""Clustering order per CQL type (ASC and DESC, nulls, empties) and range-bound containment."""

from __future__ import annotations

import datetime as dt
import functools
import ipaddress
import itertools
import math
import random
import struct
import uuid
from decimal import Decimal
from typing import Any

import pytest

from cassandra_model.clustering_order import ClusteringKeyOrder, compare_values, is_byte_identical
from cassandra_model.cql_types import parse_cql_type
from cassandra_model.errors import ClusteringValueError
from cassandra_model.table_schema import UdtRegistry
from cassandra_model.value_serializer import serialize
from testkit.event_builder import (
    EXCL_END,
    EXCL_END_INCL_START,
    EXCL_START,
    INCL_END,
    INCL_END_EXCL_START,
    INCL_START,
    Raw,
)
from tests.unit.state.support import table


def v1(time: int, clock_seq_hi: int = 0x80, node: int = 1) -> uuid.UUID:
    """A version-1 UUID with a given 60-bit timestamp."""
    return uuid.UUID(
        fields=(
            time & 0xFFFFFFFF,
            (time >> 32) & 0xFFFF,
            ((time >> 48) & 0x0FFF) | 0x1000,
            clock_seq_hi,
            0,
            node,
        )
    )


def nan(bits: int, fmt: str) -> Raw:
    return Raw(struct.pack(fmt, bits))


# type -> groups of values in ascending Cassandra order; values in one group compare equal
ORDERS: dict[str, list[list[Any]]] = {
    "int": [[Raw(b"")], [-(2**31)], [-1], [0], [1], [2**31 - 1]],
    "bigint": [[Raw(b"")], [-(2**63)], [-256], [-1], [0], [255], [2**63 - 1]],
    "smallint": [[-(2**15)], [-1], [0], [2**15 - 1]],
    "tinyint": [[-128], [-1], [0], [127]],
    "timestamp": [[-86_400_000], [-1], [0], [1], [1_700_000_000_000]],
    "text": [
        ["", Raw(b"")],
        ["A"],
        ["B"],
        ["a"],
        ["a\x00"],
        ["a\x00\x00"],
        ["a\x01"],
        ["ab"],
        ["b"],
        ["é"],
        ["中"],
    ],
    "ascii": [[""], ["A"], ["Z"], ["a"], ["aa"], ["b"]],
    "blob": [
        [b""],
        [b"\x00"],
        [b"\x00\x00"],
        [b"\x00\x01"],
        [b"\x01"],
        [b"\x7f"],
        [b"\x80"],
        [b"\xff"],
        [b"\xff\x00"],
    ],
    "boolean": [[Raw(b"")], [False], [True, Raw(b"\x02"), Raw(b"\xff")]],
    "double": [
        [Raw(b"")],
        [-math.inf],
        [-1e300],
        [-1.0],
        [-5e-324],
        [-0.0],
        [0.0],
        [5e-324],
        [1.0],
        [1e300],
        [math.inf],
        [math.nan, nan(0x7FF0000000000001, ">Q"), nan(0xFFF8000000000000, ">Q")],
    ],
    "float": [
        [-math.inf],
        [-1.5],
        [-0.0],
        [0.0],
        [1.5],
        [math.inf],
        [math.nan, nan(0x7F800001, ">I"), nan(0xFFC00000, ">I")],
    ],
    "varint": [
        [Raw(b"")],
        [-(2**100)],
        [-256],
        [-255],
        [-1, Raw(b"\xff\xff")],
        [0, Raw(b"\x00\x00")],
        [1, Raw(b"\x00\x01")],
        [127],
        [128],
        [255],
        [256],
        [2**100],
    ],
    "decimal": [
        [Raw(b"")],
        [Decimal("-100")],
        [Decimal("-1.5")],
        [Decimal("-1"), Decimal("-1.0")],
        [Decimal("-0.001")],
        [Decimal("0"), Decimal("0.000"), Decimal("0E+5")],
        [Decimal("0.001")],
        [Decimal("0.1"), Decimal("0.10")],
        [Decimal("1"), Decimal("1.0"), Decimal("1.00")],
        [Decimal("1.5")],
        [Decimal("10"), Decimal("1E+1")],
        [Decimal("100")],
        [Decimal("1E+10")],
    ],
    "uuid": [
        [Raw(b"")],
        [uuid.UUID(int=0)],  # version 0
        [v1(0xFFFFFFFF)],  # version 1, ordered by time although its bytes are larger
        [v1(2**32)],
        [v1(2**32 + 1, clock_seq_hi=0x00)],
        [uuid.UUID("00000000-0000-4000-8000-000000000000")],  # version 4: unsigned bytes
        [uuid.UUID("00000000-0000-4000-8000-000000000001")],
        [uuid.UUID("ffffffff-0000-4000-8000-000000000000")],
    ],
    "timeuuid": [
        [Raw(b"")],
        [v1(100, clock_seq_hi=0x80)],  # same time: the clock/node bytes compare SIGNED: 0x80 < 0x00 < 0x7f
        [v1(100, clock_seq_hi=0x00)],
        [v1(100, clock_seq_hi=0x7F)],
        [v1(0xFFFFFFFF)],
        [v1(2**32)],
        [v1(2**48)],
    ],
    "date": [[dt.date(1, 1, 1)], [dt.date(1969, 12, 31)], [dt.date(1970, 1, 1)], [dt.date(2024, 2, 29)]],
    "time": [[0], [1], [86_399_999_999_999]],
    "inet": [
        [ipaddress.ip_address("::")],
        [ipaddress.ip_address("::1")],
        [ipaddress.ip_address("1.2.3.4")],
        [ipaddress.ip_address("10.0.0.1")],
        [ipaddress.ip_address("255.255.255.255")],
    ],
    "frozen<list<int>>": [[[]], [[-1]], [[0]], [[0, 0]], [[0, 1]], [[1]]],
    "frozen<set<text>>": [[set()], [{"a"}], [{"a", "b"}], [{"b"}]],
    "frozen<map<int, text>>": [[{}], [{1: "a"}], [{1: "b"}], [{1: "b", 2: "a"}], [{2: "a"}]],
    "frozen<tuple<int, text>>": [
        [(None, None), Raw(b"\xff\xff\xff\xff")],  # (null, null) == (null) == ()
        [(None, "a")],
        [(0, None), Raw(b"\x00\x00\x00\x04\x00\x00\x00\x00")],  # trailing null field == missing field
        [(0, "")],
        [(0, "a")],
        [(1, None)],
    ],
}


def _serialized(type_name: str, value: Any) -> bytes:
    return serialize(parse_cql_type(type_name), value)


@pytest.mark.parametrize("type_name", list(ORDERS))
@pytest.mark.parametrize("descending", [False, True])
def test_values_sort_in_cassandra_order(type_name: str, descending: bool) -> None:
    t = parse_cql_type(type_name)
    items = [(g, _serialized(type_name, v)) for g, group in enumerate(ORDERS[type_name]) for v in group]
    rng = random.Random(type_name)
    for _ in range(5):
        rng.shuffle(items)
        ordered = sorted(
            items, key=functools.cmp_to_key(lambda a, b: compare_values(t, a[1], b[1], descending))
        )
        groups = [g for g, _ in ordered]
        assert groups == sorted(groups, reverse=descending)
    for (ga, a), (gb, b) in itertools.product(items, repeat=2):
        expected = (ga > gb) - (ga < gb)
        assert compare_values(t, a, b, descending) == (-expected if descending else expected), (ga, a, gb, b)


@pytest.mark.parametrize("descending", [False, True])
def test_null_sorts_first_and_empty_follows_the_direction(descending: bool) -> None:
    t = parse_cql_type("int")
    one = _serialized("int", 1)
    assert compare_values(t, None, b"", descending) == -1
    assert compare_values(t, None, one, descending) == -1
    assert compare_values(t, b"", one, descending) == (1 if descending else -1)
    assert compare_values(t, None, None, descending) == 0


def test_udt_fields_compare_in_order_with_nulls_first() -> None:
    udts = UdtRegistry()
    udts.define("ks", "addr", ["street", "nr"], ["text", "int"])
    t = parse_cql_type("frozen<addr>", keyspace="ks", udts=udts)
    values = [
        {"street": None, "nr": 5},
        {"street": "a", "nr": None},
        {"street": "a", "nr": 1},
        {"street": "b"},
    ]
    raws = [serialize(t, v) for v in values]
    assert all(compare_values(t, a, b) < 0 for a, b in itertools.pairwise(raws))


def test_numbers_order_like_python_numbers() -> None:
    rng = random.Random(7)
    for type_name, make in [
        ("varint", lambda: rng.choice([-1, 1]) * rng.getrandbits(rng.randint(0, 130))),
        ("decimal", lambda: Decimal(rng.randint(-(10**12), 10**12)).scaleb(rng.randint(-20, 20))),
        ("double", lambda: rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-300, 300)),
        ("bigint", lambda: rng.randint(-(2**63), 2**63 - 1)),
    ]:
        t = parse_cql_type(type_name)
        values = [make() for _ in range(300)]
        for a, b in itertools.pairwise(values):
            expected = (a > b) - (a < b)
            assert compare_values(t, _serialized(type_name, a), _serialized(type_name, b)) == expected, (a, b)


def test_byte_identity_is_known_per_type() -> None:
    assert is_byte_identical(parse_cql_type("text"))
    assert is_byte_identical(parse_cql_type("frozen<list<int>>"))
    assert not is_byte_identical(parse_cql_type("decimal"))
    assert not is_byte_identical(parse_cql_type("frozen<map<varint, int>>"))
    assert not is_byte_identical(parse_cql_type("frozen<tuple<int>>"))


def test_malformed_values_are_refused_with_a_clear_error() -> None:
    with pytest.raises(ClusteringValueError, match="int needs 4 bytes"):
        compare_values(parse_cql_type("int"), b"\x01\x02", b"\x00\x00\x00\x01")
    with pytest.raises(ClusteringValueError, match="not a frozen<list<int>> value"):
        compare_values(parse_cql_type("frozen<list<int>>"), b"\x00\x00\x00\x05", b"\x00\x00\x00\x00")


def test_keys_of_two_columns_sort_desc_then_asc() -> None:
    schema = table("two")  # c1 int DESC, c2 text ASC
    order = ClusteringKeyOrder.for_table(schema)
    rng = random.Random(3)
    rows = {(rng.randint(-5, 5), rng.choice(["", "a", "b", "ab", "é"])) for _ in range(60)}
    by_key = sorted(rows, key=lambda r: order.key([_serialized("int", r[0]), _serialized("text", r[1])]))
    assert by_key == sorted(rows, key=lambda r: (-r[0], r[1].encode()))


ROWS = [(c1, c2) for c1 in (3, 2, 1) for c2 in ("a", "b")]  # clustering order of table two
# (case, start kind, start prefix, end kind, end prefix, rows covered)
BOUNDS = [
    ("one prefix, inclusive both", INCL_START, (2,), INCL_END, (2,), {(2, "a"), (2, "b")}),
    ("after a prefix to the top", EXCL_START, (2,), INCL_END, (), {(1, "a"), (1, "b")}),
    ("bottom to before a row", INCL_START, (), EXCL_END, (2, "b"), {(3, "a"), (3, "b"), (2, "a")}),
    ("full rows inclusive", INCL_START, (3, "b"), INCL_END, (2, "a"), {(3, "b"), (2, "a")}),
    ("full rows exclusive", EXCL_START, (3, "b"), EXCL_END, (1, "a"), {(2, "a"), (2, "b")}),
    ("exclusive start on a full row", EXCL_START, (2, "a"), INCL_END, (2,), {(2, "b")}),
    ("everything", INCL_START, (), INCL_END, (), set(ROWS)),
    ("a boundary opening inclusively", EXCL_END_INCL_START, (2,), INCL_END, (2,), {(2, "a"), (2, "b")}),
    (
        "a boundary closing inclusively",
        INCL_START,
        (3,),
        INCL_END_EXCL_START,
        (2, "a"),
        {(3, "a"), (3, "b"), (2, "a")},
    ),
    ("a boundary closing exclusively", INCL_START, (), EXCL_END_INCL_START, (2,), {(3, "a"), (3, "b")}),
    ("a boundary opening exclusively", INCL_END_EXCL_START, (2,), INCL_END, (), {(1, "a"), (1, "b")}),
    ("empty: start after end", INCL_START, (1,), INCL_END, (3,), set()),
]


@pytest.mark.parametrize(("case", "sk", "start", "ek", "end", "covered"), BOUNDS, ids=[b[0] for b in BOUNDS])
def test_range_bound_containment(
    case: str, sk: int, start: tuple[Any, ...], ek: int, end: tuple[Any, ...], covered: set[tuple[int, str]]
) -> None:
    order = ClusteringKeyOrder.for_table(table("two"))

    def raw(values: tuple[Any, ...]) -> list[bytes]:
        return [_serialized(t, v) for t, v in zip(("int", "text"), values, strict=False)]

    got = {row for row in ROWS if order.in_range(raw(row), sk, raw(start), ek, raw(end))}
    assert got == covered


def test_row_key_order_matches_compare() -> None:
    order = ClusteringKeyOrder.for_table(table("desc1"))
    keys = [[_serialized("int", v)] for v in (5, 1, -3)]
    assert order.compare(keys[0], keys[1]) == -1  # DESC: 5 comes first
    assert order.compare(keys[2], keys[1]) == 1
    assert order.compare(keys[1], keys[1]) == 0

"""The native core's JSON change events against the Python codec, which is their specification.

``JsonChangeCodec(native=cdc_native.ChangeJson)`` must write exactly the bytes ``JsonChangeCodec()``
writes: for random images of a table of every type it writes itself (odd values included: NaN, the
infinities, -0.0, tiny and huge doubles, decimals of any scale and sign, text that needs escaping, values
of the wrong length that Python must handle), and for every merge case's changes as the worker's
processor emits them.
"""

from __future__ import annotations

import random
import struct
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from app.worker_core import AVAILABLE, change_json
from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.table_schema import TableSchema
from schemas.change_event import ChangeSource
from schemas.change_json import JsonChangeCodec
from state.cell_merge import NO_DELETION_TIME, Cell
from state.change import RowChange
from state.row_image import RowImage
from tests.unit.app.batch_driver import BatchDriver
from tests.unit.state.merge_cases import CASES, Case, case_events, table

pytestmark = pytest.mark.skipif(AVAILABLE != "native", reason="the native core is not installed (make setup)")

_DDL = """
CREATE TABLE ks.every (a uuid, b text, c timestamp, d double, e int, f bigint, g boolean, h decimal,
    i timeuuid, s text static, PRIMARY KEY ((a, b), c, e)) WITH ID = 00000000-0000-0000-0000-000000000201;
CREATE TABLE ks.narrow (device uuid, at timestamp, kind text, value double, count int, total bigint,
    ok boolean, note text, price decimal, tags text, PRIMARY KEY (device, at))
    WITH ID = 00000000-0000-0000-0000-000000000202;
"""
_CATALOG = load_schema_from_cql(_DDL)


def _text(rng: random.Random) -> bytes:
    pieces = [
        "a",
        "é",
        '"',
        "\\",
        "\n",
        "\r",
        "\t",
        "\x08",
        "\x0c",
        "\x00",
        "\x1f",
        "\x7f",
        "€",
        "😀",
        " ",
        "/",
    ]
    return "".join(rng.choice(pieces) for _ in range(rng.randrange(12))).encode()


def _double(rng: random.Random) -> bytes:
    special = [
        float("nan"),
        float("inf"),
        float("-inf"),
        0.0,
        -0.0,
        1e16,
        1e15,
        1e-4,
        1e-5,
        5e-324,
        1.7976931348623157e308,
    ]
    if rng.random() < 0.3:
        value = rng.choice(special)
    elif rng.random() < 0.5:
        value = rng.uniform(-1e6, 1e6) * 10 ** rng.randrange(-30, 30)
    else:
        return rng.randbytes(8)  # any bit pattern
    return struct.pack(">d", value)


def _decimal(rng: random.Random) -> bytes:
    unscaled = rng.choice([0, 1, -1, 150, -106, 10**30 + 7, -(10**40), rng.randrange(-(2**70), 2**70)])
    scale = rng.choice([0, 1, 2, 6, 7, 9, -1, -3, 30, -30, rng.randrange(-100, 100)])
    size = max(1, (unscaled.bit_length() + 8) // 8)
    return struct.pack(">i", scale) + unscaled.to_bytes(size, "big", signed=True)


_VALUES = {
    "uuid": lambda rng: rng.randbytes(16),
    "timeuuid": lambda rng: uuid.uuid1(node=rng.randrange(2**48)).bytes,
    "text": _text,
    "timestamp": lambda rng: struct.pack(">q", rng.randrange(-(2**63), 2**63)),
    "bigint": lambda rng: struct.pack(">q", rng.randrange(-(2**63), 2**63)),
    "int": lambda rng: struct.pack(">i", rng.randrange(-(2**31), 2**31)),
    "double": _double,
    "boolean": lambda rng: bytes([rng.choice([0, 1, 2, 255])]),
    "decimal": _decimal,
}


def _value(rng: random.Random, type_name: str) -> bytes:
    if rng.random() < 0.03:  # an unusual length (or bad text): Python decides
        return rng.randbytes(rng.randrange(5))
    if type_name == "text" and rng.random() < 0.02:
        return b"\xff\xfe"
    return _VALUES[type_name](rng)  # type: ignore[no-any-return]


def _image(rng: random.Random, schema: TableSchema) -> RowImage:
    parts = [_value(rng, c.type.cql()) for c in schema.partition_key]
    composite = b"".join(struct.pack(">H", len(p)) + p + b"\x00" for p in parts)
    key = parts[0] if len(parts) == 1 else composite
    clustering: tuple[bytes | None, ...] | None = tuple(_value(rng, c.type.cql()) for c in schema.clustering)
    if rng.random() < 0.1:
        clustering = None  # the static-only row

    def cells(columns: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for column in columns.values():
            if rng.random() < 0.8:
                out[column.name] = Cell(
                    rng.randrange(2**50), 0, NO_DELETION_TIME, 0, _value(rng, column.type.cql())
                )
        return out

    return RowImage(key, clustering, cells(schema.static_columns), cells(schema.regular_columns))


def _source(rng: random.Random, schema: TableSchema) -> ChangeSource:
    snapshot = rng.random() < 0.1
    return ChangeSource(
        cluster=rng.choice(["c1", 'we"ird\n']),
        keyspace=schema.keyspace,
        table=schema.table,
        write_time_us=rng.choice([None, rng.randrange(-(2**40), 2**62)]),
        node=None if snapshot else rng.choice(["n1", "nøde"]),
        segment_id=None if snapshot else rng.randrange(2**40),
        offset=None if snapshot else rng.randrange(2**31),
        snapshot=snapshot,
        expired=rng.random() < 0.1,
        name=rng.choice(["clean", "prod.cdc"]),
    )


@pytest.mark.parametrize("name", ["every", "narrow"])
def test_random_changes_are_the_bytes_python_writes(name: str) -> None:
    schema = _CATALOG.by_name("ks", name)
    assert schema is not None
    python, native = JsonChangeCodec(), JsonChangeCodec(native=change_json("native"))
    rng = random.Random(name)
    handled = 0
    for _ in range(3000):
        op = rng.choice("cud")
        before = None if op == "c" else _image(rng, schema)
        after = None if op == "d" else _image(rng, schema)
        change = RowChange(op, b"k", before, after)
        source = _source(rng, schema)
        ts_ms = rng.randrange(2**42)
        try:
            expected: Any = python.encode_change(schema, change, source, ts_ms)
        except Exception as exc:  # a value Python cannot write: the native codec must raise it too
            expected = type(exc)
        table_native = native._table(schema).native
        handled += (
            table_native.encode(before, after, op if not source.snapshot or op != "c" else "r", source, ts_ms)
            is not None
        )
        try:
            got: Any = native.encode_change(schema, change, source, ts_ms)
        except Exception as exc:
            got = type(exc)
        assert got == expected
    assert handled > 2000  # most changes are written natively (the rest have an odd value)


def test_decimals_and_doubles_read_back_as_python_wrote_them() -> None:
    schema = _CATALOG.by_name("ks", "narrow")
    assert schema is not None
    codec = JsonChangeCodec(native=change_json("native"))
    image = RowImage(
        uuid.UUID(int=5).bytes,
        (struct.pack(">q", 1_700_000_000_000),),
        {},
        {
            "price": Cell(1, 0, NO_DELETION_TIME, 0, struct.pack(">i", 2) + (150).to_bytes(2, "big")),
            "value": Cell(1, 0, NO_DELETION_TIME, 0, struct.pack(">d", 0.1)),
        },
    )
    source = ChangeSource("c", "ks", "narrow", 1_700_000_000_000_123, "n1", 3, 4)
    key, value = codec.encode_change(schema, RowChange("c", b"k", None, image), source, 5)
    assert key == b'{"at":1700000000000,"device":"00000000-0000-0000-0000-000000000005"}'
    assert b'"price":"1.50"' in value and b'"value":0.1' in value
    assert JsonChangeCodec.decode_json_object(value, "value")["after"]["price"] == str(Decimal("1.50"))


def _records(tmp_path: Path, case: Case, codec: JsonChangeCodec) -> list[tuple[str, bytes, bytes | None]]:
    schema = table(case.table)
    with BatchDriver(tmp_path, [schema], codec=codec) as driver:
        out = []
        for now in sorted(case.reads()):
            out += driver.batch(now, *case_events(case, schema))
    return [(r.topic, r.key, r.value) for r in out]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_merge_case_emits_the_same_bytes(case: Case, tmp_path: Path) -> None:
    python = _records(tmp_path / "python", case, JsonChangeCodec())
    native = _records(tmp_path / "native", case, JsonChangeCodec(native=change_json("native")))
    assert native == python

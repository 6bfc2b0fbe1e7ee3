"""The bootstrap's encoder from raw scan rows makes exactly the events of the specification,
``snapshot_events``, from the same rows decoded: keys, Avro values and digests byte for byte.

Raw rows are made here from decoded ones the way Cassandra's native protocol serializes them (values as
the project's serializer writes cells, the per-element WRITETIME and TTL lists as list<bigint> and
list<int> with nulls); tests/integration/test_pipeline_bootstrap.py compares the two on rows a real
Cassandra returns. Every case runs on both encoders ``pipeline.snapshot_core`` chooses from: the Python one
(given the rows) and the native one (``cdc_native.SnapshotEncoder``, given the rows as the result page the
scan reads, as the bootstrap hands it whole pages), skipped only where the extension is not installed.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from cassandra_model.cql_types import CellLayout
from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.table_schema import TableSchema
from cassandra_model.value_serializer import serialize
from pipeline.cassandra_scan import SCAN_TIME_KEY, RawPage, UdtValue, ttl_key, write_time_key
from pipeline.errors import PipelineError
from pipeline.snapshot_core import AVAILABLE, NativeSnapshotEncoder, snapshot_encoder
from pipeline.snapshot_encoder import SnapshotEncoder, avro_long
from pipeline.snapshot_events import table_events
from schemas.raw_event import decode_raw_event

DDL = """
CREATE TYPE ks.addr (street text, zip int, note text);
CREATE TABLE ks.items (pk int, ck text, s text static, st set<int> static, v int, tags set<text>,
    attrs map<text, int>, byint map<int, text>, home addr, nums list<int>, fixed frozen<addr>,
    frozen_set frozen<set<int>>, at timestamp, raw blob, PRIMARY KEY (pk, ck))
    WITH ID = 00000000-0000-0000-0000-0000000000c1;
CREATE TABLE ks.wide (a text, b int, c int, d int, v text, PRIMARY KEY ((a, b), c, d))
    WITH ID = 00000000-0000-0000-0000-0000000000c2;
CREATE TABLE ks.plain (id int PRIMARY KEY, v text) WITH ID = 00000000-0000-0000-0000-0000000000c3;
"""
CATALOG = load_schema_from_cql(DDL)
ITEMS = CATALOG.by_name("ks", "items")
WIDE = CATALOG.by_name("ks", "wide")
PLAIN = CATALOG.by_name("ks", "plain")
SCAN_TIME = 1_800_000_000


def _list(items: list[bytes | None]) -> bytes:
    out = len(items).to_bytes(4, "big", signed=True)
    for item in items:
        out += b"\xff\xff\xff\xff" if item is None else len(item).to_bytes(4, "big") + item
    return out


def raw_row(schema: TableSchema, row: dict[str, Any]) -> list[Any]:
    """A decoded scan row (``scan_ranges`` with write times) as ``scan_raw_ranges`` returns it."""
    out: list[Any] = [
        None if row[c.name] is None else serialize(c.type, row[c.name]) for c in schema.all_columns()
    ]
    for name in [*schema.static_columns, *schema.regular_columns]:
        t = (schema.static_columns.get(name) or schema.regular_columns[name]).type
        times, ttls = row[write_time_key(name)], row[ttl_key(name)]
        if row[name] is None:
            out += [None, None]
        elif t.multi_cell:
            ttls = ttls if isinstance(ttls, list) else [None] * len(times)
            out.append(_list([None if w is None else w.to_bytes(8, "big", signed=True) for w in times]))
            out.append(_list([None if s is None else s.to_bytes(4, "big", signed=True) for s in ttls]))
        else:
            out.append(times.to_bytes(8, "big", signed=True))
            out.append(None if ttls is None else ttls.to_bytes(4, "big", signed=True))
    out.append(row[SCAN_TIME_KEY])
    return out


def scanned(
    schema: TableSchema, values: dict[str, Any], times: dict[str, Any], ttls: dict[str, Any] | None = None
) -> dict[str, Any]:
    row: dict[str, Any] = {c.name: values.get(c.name) for c in schema.all_columns()}
    for name in [*schema.static_columns, *schema.regular_columns]:
        row[write_time_key(name)] = times.get(name) if row[name] is not None else None
        row[ttl_key(name)] = (ttls or {}).get(name) if row[name] is not None else None
    row[SCAN_TIME_KEY] = SCAN_TIME
    return row


def item(pk: int, ck: str, base: int, **extra: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    values = {
        "pk": pk, "ck": ck, "s": f"static {pk}", "st": {-3, 2}, "v": pk * 10, "tags": {"z", ck, "a"},
        "attrs": {ck: pk, "m": 1}, "byint": {-1: "minus", 7: "seven"},
        "home": UdtValue(street=f"street {pk}", zip=None, note=""), "nums": [3, 1, 2],
        "fixed": UdtValue(street=ck, zip=7, note=None), "frozen_set": {5, -5},
        "at": dt.datetime(2024, 5, 6, 7, 8, 9, 123000), "raw": b"",
    }  # fmt: skip
    times = {
        "s": base, "st": [base, base], "v": base + 1, "tags": [base, base + 2, base + 3],
        "attrs": [base, base], "byint": [base + 1, base + 1], "home": [base + 5, None, base + 5],
        "nums": [base + 9, base + 6, base + 7], "fixed": base, "frozen_set": base, "at": base, "raw": base,
    }  # fmt: skip
    values.update(extra)
    return values, times


def protocol_value(value: bytes | None) -> bytes:
    """A value as a result page holds it: int32 length (-1: null), then its bytes."""
    return b"\xff\xff\xff\xff" if value is None else len(value).to_bytes(4, "big") + value


def one_page(raw: list[list[Any]]) -> RawPage:
    """Raw rows (scan time last) as one result page."""
    data = b"".join(protocol_value(v) for row in raw for v in row[:-1])
    return RawPage(data, len(raw), len(raw[0]) - 1, raw[0][-1])


def built(encoder: Any, raw: list[list[Any]]) -> list[tuple[bytes, list[Any]]]:
    """The events of raw rows: the Python encoder takes the rows, the native one the page holding them."""
    if isinstance(encoder, NativeSnapshotEncoder):
        return list(encoder.events_of_pages([one_page(raw)]))
    return list(encoder.events(raw))


@pytest.fixture(params=["python", "native"])
def core(request: pytest.FixtureRequest) -> str:
    if request.param == "native" and AVAILABLE != "native":
        pytest.skip("the native core (cdc_native) is not installed: make setup builds it")
    return request.param  # type: ignore[no-any-return]


def _same_events(core: str, schema: TableSchema, rows: list[dict[str, Any]], **limits: Any) -> int:
    expected = [
        e
        for _, events in table_events(schema, rows, cluster="c", published_at_ms=42, **limits)
        for e in events
    ]
    encoder = snapshot_encoder(schema, core=core, cluster="c", published_at_ms=42, **limits)
    assert isinstance(encoder, NativeSnapshotEncoder) == (core == "native")
    found = [e for _, events in built(encoder, [raw_row(schema, r) for r in rows]) for e in events]
    assert len(found) == len(expected)
    for made, spec in zip(found, expected, strict=True):
        assert decode_raw_event(made.value) == decode_raw_event(spec.value)
        assert made == spec, "same record, other bytes"
    return len(found)


def test_every_kind_of_cell_gives_the_specifications_bytes(core: str) -> None:
    rows = []
    for pk in range(4):
        for n, ck in enumerate(("b", "c", "d")):
            values, times = item(pk, ck, 1000 * pk + 10 * n)
            rows.append(scanned(ITEMS, values, times))
    assert _same_events(core, ITEMS, rows) == 4


def test_ttls_per_cell_and_per_element_and_whole_rows_that_expire(core: str) -> None:
    values, times = item(1, "b", 500)
    partial = scanned(ITEMS, values, times, {"v": 60, "tags": [None, 30, None], "home": [90, None, 90]})
    values, times = item(
        1, "c", 600, st=None, s=None, tags=None, attrs=None, byint=None, home=None, nums=None
    )
    every = {"v": 100, "fixed": 200, "frozen_set": 100, "at": 7, "raw": 1}
    whole = scanned(ITEMS, values, times, every)
    assert _same_events(core, ITEMS, [partial, whole]) == 1


def test_rows_without_cells_and_a_partition_of_static_cells_only(core: str) -> None:
    bare = scanned(ITEMS, {"pk": 5, "ck": "bare"}, {})
    values, times = item(5, "full", 77)
    full = scanned(ITEMS, values, times)
    static_only = scanned(ITEMS, {"pk": 6, "s": "only static", "st": {1}}, {"s": 3, "st": [4]})
    nothing = scanned(ITEMS, {"pk": 7, "ck": "x"}, {})
    assert _same_events(core, ITEMS, [bare, full, static_only, nothing]) == 3


def test_one_write_and_mixed_write_times_of_collections(core: str) -> None:
    rows = []
    for n, stamps in enumerate(([5, 5, 5], [5, 6, 5], [7, 7, 7])):
        values, times = item(8, f"r{n}", 10)
        times.update(tags=stamps, nums=stamps, attrs=stamps[:2], byint=stamps[1:])
        rows.append(scanned(ITEMS, values, times))
    assert _same_events(core, ITEMS, rows) == 1


@pytest.mark.parametrize(("max_rows", "max_bytes"), [(2, 10**6), (500, 40), (1, 1)])
def test_wide_partitions_are_cut_where_the_specification_cuts_them(
    core: str, max_rows: int, max_bytes: int
) -> None:
    rows = [
        scanned(WIDE, {"a": "k", "b": 1, "c": c, "d": d, "v": "x" * (c * 7 % 23)}, {"v": 100 + c})
        for c in range(4)
        for d in range(3)
    ] + [scanned(WIDE, {"a": "k", "b": 2, "c": 0, "d": 0, "v": None}, {})]
    assert _same_events(core, WIDE, rows, max_rows=max_rows, max_bytes=max_bytes) >= 2


def test_large_values_and_many_cells_take_multi_byte_lengths(core: str) -> None:
    rows = [scanned(PLAIN, {"id": i, "v": "é" * (40 * i)}, {"v": -(2**62) + i}) for i in range(6)]
    assert _same_events(core, PLAIN, rows) == 6
    assert [avro_long(v) for v in (0, -1, 1, 63, 64, -(2**63), 2**63 - 1)] == [
        b"\x00", b"\x01", b"\x02", b"\x7e", b"\x80\x01", b"\xff" * 9 + b"\x01", b"\xfe" + b"\xff" * 8 + b"\x01",
    ]  # fmt: skip


def test_write_times_that_do_not_match_the_value_are_a_clear_error(core: str) -> None:
    values, times = item(9, "b", 10)
    row = raw_row(ITEMS, scanned(ITEMS, values, times))
    tags = next(c for c in SnapshotEncoder(ITEMS, cluster="c", published_at_ms=1).regular if c.name == "tags")
    assert tags.layout is CellLayout.SET
    row[tags.time_at] = _list([(5).to_bytes(8, "big")])  # one write time for three elements
    row[tags.ttl_at] = _list([None])
    with pytest.raises(PipelineError, match=r"bootstrap of ks\.items, column tags: WRITETIME gave 1"):
        built(snapshot_encoder(ITEMS, core=core, cluster="c", published_at_ms=1), [row])
    row[tags.time_at] = None
    with pytest.raises(PipelineError, match="column tags: WRITETIME gave null"):
        built(snapshot_encoder(ITEMS, core=core, cluster="c", published_at_ms=1), [row])

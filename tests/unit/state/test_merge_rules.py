"""Every merge rule of DESIGN.md as a table: writes (as CQL-like operations), then the rows SELECT shows.

Each case is also merged in reverse order and in shuffled orders with duplicates, which must give the
same state. The operations render CQL (``op.cql(schema)``), so the same table can be replayed against a
real Cassandra with USING TIMESTAMP to check the expectations.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest

from agents.commitlog.table_schema import TableSchema
from tests.unit.state.event_builder import (
    EXCL_END,
    EXCL_END_INCL_START,
    INCL_END,
    INCL_START,
    NOW,
    AddElements,
    DeleteColumns,
    DeletePartition,
    DeleteRange,
    DeleteRow,
    EventBuilder,
    Operation,
    RangeMarkers,
    RemoveElements,
    SetField,
    Write,
)
from tests.unit.state.support import decoded_rows, merged, shuffled_with_duplicates, table


@dataclass
class Case:
    name: str
    ops: list[Operation]
    expect: dict[int, list[dict[str, Any]]] | list[dict[str, Any]]
    table: str = "kv"
    ops_at: dict[int, int] = field(default_factory=dict)  # op index -> the node's clock when written

    def reads(self) -> dict[int, list[dict[str, Any]]]:
        return self.expect if isinstance(self.expect, dict) else {NOW: self.expect}


def row(ck: int | None = 1, **values: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"pk": 1}
    if ck is not None:
        out["ck"] = ck
    out.update(values)
    return out


def ins(ck: int, ts: int = 10, ttl: int = 0, **values: Any) -> Write:
    return Write(1, (ck,), values, ts=ts, ttl=ttl, insert=True)


def upd(ck: int, ts: int = 10, ttl: int = 0, **values: Any) -> Write:
    return Write(1, (ck,), values, ts=ts, ttl=ttl)


FIVE_ROWS = [ins(ck, v=ck) for ck in range(1, 6)]

CASES = [
    # -- reconcile of one cell
    Case("higher timestamp wins whatever the arrival order", [upd(1, 10, v=1), upd(1, 5, v=2)], [row(v=1)]),
    Case("equal timestamps: the greater value wins", [upd(1, v=1), upd(1, v=2)], [row(v=2)]),
    Case(
        "equal timestamps: values compare as unsigned bytes, so -1 beats 1",
        [upd(1, v=1), upd(1, v=-1)],
        [row(v=-1)],
    ),
    Case("equal timestamps: text compares as bytes", [upd(1, w="b"), upd(1, w="ab")], [row(w="b")]),
    Case(
        "equal timestamps: a tombstone beats a live cell",
        [ins(1, v=5), DeleteColumns(1, (1,), ("v",), ts=10)],
        [row()],
    ),
    Case(
        "equal timestamps: an expiring cell beats a live one, then expires",
        [ins(1, v=9), upd(1, ttl=100, v=1)],
        {NOW: [row(v=1)], NOW + 99: [row(v=1)], NOW + 100: [row()]},
    ),
    Case(
        "equal timestamps: a tombstone beats an expiring cell",
        [upd(1, ttl=100, v=1), DeleteColumns(1, (1,), ("v",), ts=10)],
        [],
    ),
    Case(
        "equal timestamps, both expiring: the later expiry wins over the greater value",
        [upd(1, ttl=50, v=2), upd(1, ttl=100, v=1)],
        {NOW: [row(v=1)], NOW + 60: [row(v=1)], NOW + 100: []},
    ),
    # -- deletions shadow <= their timestamp
    Case(
        "a row deletion at the cell's timestamp deletes it (<=)", [ins(1, v=1), DeleteRow(1, (1,), ts=10)], []
    ),
    Case(
        "a row deletion removes the row marker; a later UPDATE revives only its cell",
        [ins(1, v=1, w="x"), DeleteRow(1, (1,), ts=11), upd(1, 12, w="y")],
        [row(w="y")],
    ),
    Case(
        "a late older write does not resurrect a deleted row",
        [DeleteRow(1, (1,), ts=20), ins(1, 15, v=1)],
        [],
    ),
    Case(
        "a partition deletion removes rows and static columns; later writes survive",
        [ins(1, v=1, s=1), ins(2, v=2), DeletePartition(1, ts=11), ins(3, 12, v=3)],
        [row(3, v=3)],
    ),
    Case(
        "a partition deletion at the write's timestamp deletes it",
        [ins(1, v=1), DeletePartition(1, ts=10)],
        [],
    ),
    Case(
        "range deletion ck >= 2 AND ck < 4",
        [*FIVE_ROWS, DeleteRange(1, low=2, high=4, high_inclusive=False, ts=11)],
        [row(1, v=1), row(4, v=4), row(5, v=5)],
    ),
    Case(
        "range deletion ck > 2 AND ck <= 4",
        [*FIVE_ROWS, DeleteRange(1, low=2, high=4, low_inclusive=False, ts=11)],
        [row(1, v=1), row(2, v=2), row(5, v=5)],
    ),
    Case("open range ck >= 3", [*FIVE_ROWS, DeleteRange(1, low=3, ts=11)], [row(1, v=1), row(2, v=2)]),
    Case(
        "open range ck < 3",
        [*FIVE_ROWS, DeleteRange(1, high=3, high_inclusive=False, ts=11)],
        [row(3, v=3), row(4, v=4), row(5, v=5)],
    ),
    Case(
        "a range deletion at the rows' timestamp deletes them (<=)",
        [*FIVE_ROWS, DeleteRange(1, low=5, ts=10)],
        [row(ck, v=ck) for ck in range(1, 5)],
    ),
    Case(
        "range deletion on a DESC column: ck >= 2 AND ck < 4",
        [*FIVE_ROWS, DeleteRange(1, low=2, high=4, high_inclusive=False, ts=11)],
        [row(5, v=5), row(4, v=4), row(1, v=1)],
        table="desc1",
    ),
    Case(
        "range deletion of a prefix (c1 = 1) with two clustering columns",
        [Write(1, (c1, c2), {"v": c1}, ts=10) for c1, c2 in [(1, "a"), (1, "b"), (2, "a"), (3, "b")]]
        + [DeleteRange(1, (1,), ts=11)],
        [{"pk": 1, "c1": 3, "c2": "b", "v": 3}, {"pk": 1, "c1": 2, "c2": "a", "v": 2}],
        table="two",
    ),
    Case(
        "range deletion under a prefix: c1 = 1 AND c2 >= 'a' AND c2 <= 'a'",
        [Write(1, (c1, c2), {"v": c1}, ts=10) for c1, c2 in [(1, "a"), (1, "b"), (2, "a")]]
        + [DeleteRange(1, (1,), low="a", high="a", ts=11)],
        [{"pk": 1, "c1": 2, "c2": "a", "v": 2}, {"pk": 1, "c1": 1, "c2": "b", "v": 1}],
        table="two",
    ),
    Case(
        "range deletion starting after a full row (EXCL_START on (2, 'a'))",
        [Write(1, (c1, c2), {"v": c1}, ts=10) for c1, c2 in [(2, "a"), (2, "b"), (1, "a")]]
        + [RangeMarkers(1, [(7, (2, "a"), 11), (INCL_END, (), 11)])],
        [{"pk": 1, "c1": 2, "c2": "a", "v": 2}],
        table="two",
    ),
    Case(
        "a write newer than a range deletion survives it",
        [*FIVE_ROWS, DeleteRange(1, low=1, high=5, ts=11), upd(2, 12, v=7)],
        [row(2, v=7)],
    ),
    Case(
        "a range deletion does not touch static columns",
        [ins(1, v=1, s=5), DeleteRange(1, low=0, ts=11)],
        [row(None, s=5)],
    ),
    Case(
        "a row deletion does not touch static columns",
        [ins(1, v=1, s=5), DeleteRow(1, (1,), ts=11)],
        [row(None, s=5)],
    ),
    Case(
        "boundary markers: [1, 3) at ts 11 then [3, 5] at ts 12 in one update",
        [
            *FIVE_ROWS,
            upd(3, 11, v=33),
            RangeMarkers(
                1, [(INCL_START, (1,), 11), (EXCL_END_INCL_START, (3,), 11, 12), (INCL_END, (5,), 12)]
            ),
        ],
        [],
    ),
    Case(
        "boundary markers: the older half lets a newer write live",
        [
            *FIVE_ROWS,
            upd(2, 12, v=22),
            upd(4, 12, v=44),
            RangeMarkers(1, [(INCL_START, (1,), 11), (5, (3,), 11, 13), (EXCL_END, (5,), 13)]),
        ],
        [row(2, v=22), row(5, v=5)],
    ),
    # -- row liveness
    Case("INSERT of key columns only creates a row", [Write(1, (1,), {}, ts=10, insert=True)], [row()]),
    Case("INSERT of nulls creates a row of nulls", [ins(1, v=None, w=None)], [row()]),
    Case("UPDATE setting a null creates no row", [upd(1, v=None)], []),
    Case(
        "a row made by UPDATE disappears with its last cell",
        [upd(1, v=1), DeleteColumns(1, (1,), ("v",), ts=11)],
        [],
    ),
    Case(
        "a row made by INSERT stays when its cells are deleted",
        [ins(1, v=1), DeleteColumns(1, (1,), ("v",), ts=11)],
        [row()],
    ),
    Case(
        "INSERT USING TTL: the row expires with its cells",
        [ins(1, ttl=100, v=1)],
        {NOW + 99: [row(v=1)], NOW + 100: []},
    ),
    Case(
        "a later UPDATE without TTL outlives a TTL'd INSERT",
        [ins(1, ttl=100, v=1, w="x"), upd(1, 11, w="y")],
        {NOW: [row(v=1, w="y")], NOW + 200: [row(w="y")]},
    ),
    Case(
        "equal-timestamp row markers: the expiring one wins, so the row expires",
        [Write(1, (1,), {}, ts=10, insert=True), Write(1, (1,), {}, ts=10, ttl=100, insert=True)],
        {NOW: [row()], NOW + 100: []},
    ),
    Case(
        "TTL counts from the writing node's clock",
        [ins(1, ttl=100, v=1)],
        {NOW + 149: [row(v=1)], NOW + 150: []},
        ops_at={0: NOW + 50},
    ),
    # -- static columns
    Case(
        "static columns alone read as one row with null clustering",
        [Write(1, (), {"s": 7}, ts=10)],
        [row(None, s=7)],
    ),
    Case(
        "static columns appear in every row",
        [ins(1, v=1), ins(2, v=2), Write(1, (), {"s": 7}, ts=11)],
        [row(1, v=1, s=7), row(2, v=2, s=7)],
    ),
    Case(
        "an expiring static column",
        [Write(1, (), {"s": 7}, ts=10, ttl=100)],
        {NOW: [row(None, s=7)], NOW + 100: []},
    ),
    Case(
        "the static-only row goes when a row appears",
        [Write(1, (), {"s": 7}, ts=10), upd(2, 11, v=2)],
        [row(2, v=2, s=7)],
    ),
    # -- collections and UDTs
    Case(
        "overwriting a set deletes older elements (complex deletion at ts-1)",
        [
            AddElements(1, (1,), "st", {1}, ts=9),
            Write(1, (1,), {"st": {2}}, ts=10),
            AddElements(1, (1,), "st", {3}, ts=10),
        ],
        [row(st=[2, 3])],
    ),
    Case(
        "a removed set element stays removed against an add at the same timestamp",
        [
            Write(1, (1,), {"st": {1, 2}}, ts=10),
            RemoveElements(1, (1,), "st", {1}, ts=11),
            AddElements(1, (1,), "st", {1}, ts=11),
        ],
        [row(st=[2])],
    ),
    Case(
        "map put, key deletion and same-timestamp value tie",
        [
            Write(1, (1,), {"m": {"a": 1}}, ts=10),
            AddElements(1, (1,), "m", {"b": 2}, ts=11),
            RemoveElements(1, (1,), "m", ["a"], ts=12),
            AddElements(1, (1,), "m", {"b": 3}, ts=11),
        ],
        [row(m={"b": 3})],
    ),
    Case(
        "list elements are ordered by their timeuuid paths, not by arrival",
        [
            AddElements(1, (1,), "l", [3], ts=30),
            AddElements(1, (1,), "l", [1, 2], ts=10),
            AddElements(1, (1,), "l", [9], ts=20),
        ],
        [row(l=[1, 2, 9, 3])],
    ),
    Case(
        "deleting a collection column deletes elements up to its timestamp",
        [
            Write(1, (1,), {"l": [1]}, ts=10),
            DeleteColumns(1, (1,), ("l",), ts=10),
            AddElements(1, (1,), "l", [5], ts=11),
        ],
        [row(l=[5])],
    ),
    Case("an INSERT of an empty set leaves the row with a null set", [ins(1, st=set())], [row()]),
    Case(
        "UDT fields set one by one, then one set to null",
        [
            SetField(1, (1,), "a", "street", "x", ts=10),
            SetField(1, (1,), "a", "nr", 5, ts=10),
            SetField(1, (1,), "a", "nr", None, ts=11),
        ],
        [row(a={"street": "x", "nr": None})],
    ),
    Case(
        "overwriting a UDT clears fields written before",
        [SetField(1, (1,), "a", "nr", 5, ts=9), Write(1, (1,), {"a": {"street": "y"}}, ts=10)],
        [row(a={"street": "y", "nr": None})],
    ),
    Case(
        "collection elements expire one by one",
        [AddElements(1, (1,), "st", {1}, ts=10, ttl=100), AddElements(1, (1,), "st", {2}, ts=10)],
        {NOW: [row(st=[1, 2])], NOW + 100: [row(st=[2])]},
    ),
    # -- schema
    Case(
        "a re-added column hides its cells written before the drop",
        [ins(1, 50, v=1, w=1), upd(1, 90, w=2)],
        [row(v=1)],
        table="readd",
    ),
    Case(
        "a re-added column shows cells written after the drop",
        [ins(1, 50, v=1, w=1), upd(1, 150, w=3)],
        [row(v=1, w=3)],
        table="readd",
    ),
    Case(
        "clustering values that compare equal (1.0 and 1.00) are one row",
        [Write(1, (Decimal("1.0"),), {"v": 1}, ts=10), Write(1, (Decimal("1.00"),), {"v": 2}, ts=11)],
        [row(Decimal("1.0"), v=2)],
        table="dec",
    ),
    Case(
        "a table without clustering columns",
        [
            Write(1, (), {"v": 1}, ts=10, insert=True),
            DeleteColumns(1, (), ("v",), ts=11),
            Write(1, (), {"w": "x"}, ts=12),
        ],
        [{"pk": 1, "w": "x"}],
        table="single",
    ),
]


def _events(case: Case, schema: TableSchema) -> list[dict[str, Any]]:
    builder = EventBuilder(schema)
    return [builder.event(op, now=case.ops_at.get(i, NOW)) for i, op in enumerate(case.ops)]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rule(case: Case) -> None:
    schema = table(case.table)
    events = _events(case, schema)
    state = merged(events, schema)
    for now, expected in case.reads().items():
        assert decoded_rows(state, schema, now) == expected, f"read at NOW+{now - NOW}"
    assert merged(events[::-1], schema) == state
    rng = random.Random(case.name)
    for _ in range(5):
        assert merged(shuffled_with_duplicates(events, rng), schema) == state


def test_boundary_markers_equal_two_separate_range_deletions() -> None:
    schema = table("kv")
    builder = EventBuilder(schema)
    rows = [builder.event(ins(ck, v=ck)) for ck in range(1, 6)]
    boundary = builder.event(
        RangeMarkers(1, [(INCL_START, (1,), 11), (EXCL_END_INCL_START, (3,), 11, 12), (INCL_END, (5,), 12)])
    )
    separate = [
        builder.event(DeleteRange(1, low=1, high=3, high_inclusive=False, ts=11)),
        builder.event(DeleteRange(1, low=3, high=5, ts=12)),
    ]
    assert merged([*rows, boundary], schema) == merged([*rows, *separate], schema)


def test_every_operation_renders_cql() -> None:
    schema = table("kv")
    assert (
        ins(1, ttl=5, v=1).cql(schema)
        == "INSERT INTO ks.kv (pk, ck, v) VALUES (1, 1, 1) USING TIMESTAMP 10 AND TTL 5"
    )
    assert DeleteRange(1, low=2, high=4, high_inclusive=False, ts=3).cql(schema) == (
        "DELETE FROM ks.kv USING TIMESTAMP 3 WHERE pk = 1 AND ck >= 2 AND ck < 4"
    )
    assert SetField(1, (1,), "a", "nr", 5, ts=2).cql(schema) == (
        "UPDATE ks.kv USING TIMESTAMP 2 SET a.nr = 5 WHERE pk = 1 AND ck = 1"
    )
    assert Write(1, (1,), {"a": {"street": "x"}}, ts=2, insert=True).cql(schema) == (
        "INSERT INTO ks.kv (pk, ck, a) VALUES (1, 1, {street: 'x'}) USING TIMESTAMP 2"
    )
    for case in CASES:
        for op in case.ops:
            if not isinstance(op, RangeMarkers):
                assert op.cql(table(case.table)).startswith(("INSERT", "UPDATE", "DELETE"))

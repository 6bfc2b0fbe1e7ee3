"""Every merge rule of docs/ARCHITECTURE.md as a table of cases: CQL-like writes, then the rows SELECT shows.

One table for two kinds of tests. The pure tests (test_merge_rules.py) merge the cases' raw events and
check the rows written here by hand. The oracle (tests/integration/test_merge_vs_cassandra.py) runs the
same writes as CQL on a real Cassandra and checks the state against what SELECT returns there, and the
hand-written rows too, so a case cannot encode a wrong belief about Cassandra.

Besides event_builder's operations this module has the ones whose raw events depend on what the partition
holds when they run (Cassandra reads before it writes them: list elements by index or value, counter
increments) or that group statements (a batch makes one partition update). ``build_events`` turns any
of them into raw events in execution order.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from cassandra_model.cql_types import ListType
from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.table_schema import TableSchema
from cassandra_model.value_serializer import serialize
from state.cell_merge import Cell
from state.partition_state import PartitionState
from state.row_image import decode_row, partition_images
from testkit.event_builder import (
    EXCL_END,
    EXCL_END_INCL_START,
    INCL_END,
    INCL_START,
    NOW,
    AddElements,
    CounterShard,
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
    _literal,
    _using,
    _where,
    timeuuid_path,
)
from tests.unit.state import support

# tables of these cases besides support's (kv, two, desc1, cnt, single, readd, dec)
_DDL = """
CREATE TYPE ks.addr (street text, nr int);
CREATE TABLE ks.coll (pk int, ck int, v int, l list<text>, fl frozen<list<int>>,
    fm frozen<map<text, int>>, fu frozen<addr>, tp tuple<int, text>, sl list<int> static,
    PRIMARY KEY (pk, ck)) WITH ID = 00000000-0000-0000-0000-000000000101;
CREATE TABLE ks.mix (pk int, c1 int, c2 int, c3 text, v int, PRIMARY KEY (pk, c1, c2, c3))
    WITH CLUSTERING ORDER BY (c1 ASC, c2 DESC, c3 DESC) AND ID = 00000000-0000-0000-0000-000000000102;
CREATE TABLE ks.readd_ms (pk int, ck int, v int, w int, PRIMARY KEY (pk, ck))
    WITH ID = 00000000-0000-0000-0000-000000000103;
ALTER TABLE ks.readd_ms DROP w USING TIMESTAMP 100000;
ALTER TABLE ks.readd_ms ADD w int;
"""
# readd_ms: system_schema keeps a drop time in milliseconds, so a table read back from Cassandra has the
# drop time of support's readd (100 µs) as 0 while the node that ran the ALTER still uses 100 µs

_EXTRA = load_schema_from_cql(_DDL)


def table(name: str) -> TableSchema:
    """A case table's schema (keyspace ``ks``)."""
    schema = _EXTRA.by_name("ks", name) or support.CATALOG.by_name("ks", name)
    assert schema is not None, name
    return schema


# ---------------------------------------------------------------------------------------------------------
# operations Cassandra reads before it writes, and batches

#: Cassandra's reference time for prepended list elements (2010-01-01, µs): they are named by timeuuids
#: as far before it as the clock is after it, so each prepend sorts before everything earlier
PREPEND_REFERENCE_US = 1_262_304_000_000_000


@dataclass
class Prepend:
    """``SET l = [...] + l``: elements placed before every element the list has."""

    key: Any
    clustering: tuple[Any, ...] = ()
    column: str = ""
    elements: list[Any] = field(default_factory=list)
    ts: int = 1

    def cql(self, schema: TableSchema) -> str:
        return (
            f"UPDATE {schema.name} {_using(self.ts)} SET {self.column} = {_literal(self.elements)} + "
            f"{self.column} WHERE {_where(schema, self.key, self.clustering)}"
        )


@dataclass
class SetIndex:
    """``SET l[i] = value``: a new version of the element the list has at index i when it runs."""

    key: Any
    clustering: tuple[Any, ...] = ()
    column: str = ""
    index: int = 0
    value: Any = None
    ts: int = 1

    def cql(self, schema: TableSchema) -> str:
        return (
            f"UPDATE {schema.name} {_using(self.ts)} SET {self.column}[{self.index}] = "
            f"{_literal(self.value)} WHERE {_where(schema, self.key, self.clustering)}"
        )


@dataclass
class DeleteIndex:
    """``DELETE l[i] FROM``: a tombstone for the element at index i when it runs."""

    key: Any
    clustering: tuple[Any, ...] = ()
    column: str = ""
    index: int = 0
    ts: int = 1

    def cql(self, schema: TableSchema) -> str:
        return (
            f"DELETE {self.column}[{self.index}] FROM {schema.name} {_using(self.ts)} "
            f"WHERE {_where(schema, self.key, self.clustering)}"
        )


@dataclass
class RemoveFromList:
    """``SET l = l - [...]``: tombstones for every element equal to one of the values when it runs."""

    key: Any
    clustering: tuple[Any, ...] = ()
    column: str = ""
    values: list[Any] = field(default_factory=list)
    ts: int = 1

    def cql(self, schema: TableSchema) -> str:
        return (
            f"UPDATE {schema.name} {_using(self.ts)} SET {self.column} = {self.column} - "
            f"{_literal(self.values)} WHERE {_where(schema, self.key, self.clustering)}"
        )


@dataclass
class Increment:
    """``SET c = c + delta`` on a counter. CQL takes no timestamp for counters: ``ts`` is the node's.

    Logged as the leader's new running total under a higher clock. After a row deletion a real leader
    may go on from the total in its counter cache (Cassandra leaves increments after a delete undefined);
    the model starts again from what is visible, so cases do not increment a counter whose row was deleted.
    """

    key: Any
    clustering: tuple[Any, ...] = ()
    column: str = ""
    delta: int = 1
    ts: int = 1

    def cql(self, schema: TableSchema) -> str:
        sign = "+" if self.delta >= 0 else "-"
        return (
            f"UPDATE {schema.name} SET {self.column} = {self.column} {sign} {abs(self.delta)} "
            f"WHERE {_where(schema, self.key, self.clustering)}"
        )


@dataclass
class Batch:
    """An unlogged batch on one partition: Cassandra logs its statements as one partition update."""

    ops: list[Any] = field(default_factory=list)

    @property
    def key(self) -> Any:
        return self.ops[0].key

    def cql(self, schema: TableSchema) -> str:
        return "BEGIN UNLOGGED BATCH " + "; ".join(op.cql(schema) for op in self.ops) + "; APPLY BATCH"


Op = Operation | Prepend | SetIndex | DeleteIndex | RemoveFromList | Increment | Batch

#: operations that are log records, not statements: no CQL makes exactly them
LOG_ONLY = (RangeMarkers, CounterShard)


def with_key(op: Op, key: Any) -> Op:
    """The same operation on another partition."""
    if isinstance(op, Batch):
        return Batch([with_key(o, key) for o in op.ops])
    return replace(op, key=key)


def has_cql(op: Op) -> bool:
    if isinstance(op, Batch):
        return all(has_cql(o) for o in op.ops)
    return not isinstance(op, LOG_ONLY)


def ttl_of(op: Op) -> int:
    if isinstance(op, Batch):
        return max((ttl_of(o) for o in op.ops), default=0)
    return getattr(op, "ttl", 0)


# ---------------------------------------------------------------------------------------------------------
# raw events


def prepend_path(clock_micros: int, index: int) -> bytes:
    """The path of a prepend's ``index``-th element: the clock mirrored around the reference time."""
    return timeuuid_path(2 * PREPEND_REFERENCE_US - clock_micros, index)


class EventMaker:
    """Raw events of a sequence of operations on one table, in execution order.

    Keeps the partitions as merged so far, which is what Cassandra reads for list operations by index or
    value and for counter increments (the leader's running total, under a clock that only grows).
    """

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self.builder = EventBuilder(schema)
        self.states: dict[bytes, PartitionState] = {}
        self._counter_clock = itertools.count(1)

    def events(self, op: Op, *, now: int = NOW, clock_micros: int | None = None) -> list[dict[str, Any]]:
        """The events of ``op`` run at ``now`` (s); ``clock_micros`` as in ``EventBuilder.event``."""
        out = self._events(op, now, clock_micros)
        for event in out:
            key = event["partition_key"]
            self.states.setdefault(key, PartitionState(key)).apply(event, self.schema)
        return out

    def _events(self, op: Op, now: int, clock: int | None) -> list[dict[str, Any]]:
        if isinstance(op, Batch):
            return [e for o in op.ops for e in self._events(o, now, clock)]
        if isinstance(op, Prepend):
            t = self._list_type(op.column)
            micros = op.ts if clock is None else clock
            cells = [
                self.builder.cell(
                    op.column, serialize(t.element, v), op.ts, now=now, path=prepend_path(micros, i)
                )
                for i, v in enumerate(op.elements)
            ]
            return [self._complex_event(op, cells)]
        if isinstance(op, SetIndex | DeleteIndex):
            current = self._current(op, now)
            value = (
                serialize(self._list_type(op.column).element, op.value) if isinstance(op, SetIndex) else None
            )
            assert isinstance(current, tuple) and op.index < len(current), f"no element {op.index} to change"
            cell = self.builder.cell(op.column, value, op.ts, now=now, path=current[op.index].path)
            return [self._complex_event(op, [cell])]
        if isinstance(op, RemoveFromList):
            removed = {serialize(self._list_type(op.column).element, v) for v in op.values}
            current = self._current(op, now) or ()
            assert isinstance(current, tuple)
            cells = [
                self.builder.cell(op.column, None, op.ts, now=now, path=c.path)
                for c in current
                if c.value in removed
            ]
            return [self._complex_event(op, cells)]
        if isinstance(op, Increment):
            row = self._row(op.key, op.clustering, now)
            total = (row or {}).get(op.column) or 0
            shard = CounterShard(
                op.key, op.clustering, op.column, 1, next(self._counter_clock), total + op.delta, ts=op.ts
            )
            return [self.builder.event(shard, now=now)]
        return [self.builder.event(op, now=now, clock_micros=clock)]

    def _list_type(self, column: str) -> ListType:
        t = self.builder.column(column).type
        assert isinstance(t, ListType), f"{column} is not a list"
        return t

    def _complex_event(self, op: Any, cells: list[dict[str, Any]]) -> dict[str, Any]:
        b = self.builder
        if op.column in self.schema.static_columns:
            return b.raw_event(op.key, static_row=b.row([], cells=cells))
        return b.raw_event(op.key, rows=[b.row(b.clustering(op.clustering), cells=cells)])

    def _images(self, key: Any, now: int) -> list[Any]:
        state = self.states.get(self.builder.partition_key(key))
        return [] if state is None else partition_images(state, self.schema, now)

    def _current(self, op: Any, now: int) -> Cell | tuple[Cell, ...] | None:
        """The live column ``op`` names, as the partition holds it now."""
        if op.column in self.schema.static_columns:
            images = self._images(op.key, now)
            return images[0].static.get(op.column) if images else None
        clustering = tuple(self.builder.clustering(op.clustering))
        for image in self._images(op.key, now):
            if image.clustering == clustering:
                return image.regular.get(op.column)
        return None

    def _row(self, key: Any, clustering: tuple[Any, ...], now: int) -> dict[str, Any] | None:
        raw = tuple(self.builder.clustering(clustering))
        for image in self._images(key, now):
            if image.clustering == raw:
                return decode_row(image, self.schema)
        return None


# ---------------------------------------------------------------------------------------------------------
# cases


@dataclass
class Case:
    """Writes in execution order and the rows SELECT shows: ``expect`` maps a read time to the rows
    (each read holds until the next one), or is the rows at ``NOW``.

    ``ops_at`` gives some operations another node clock than ``NOW``. With ``clocked`` the writes ran one
    millisecond apart from ``NOW`` and list elements are named by that clock, as Cassandra does;
    otherwise by their write timestamps (so a case can order elements against execution order).
    ``oracle_rows`` False: Cassandra cannot show ``expect`` for these CQL statements (it depends on a
    clock Cassandra does not let a client choose); the state is still checked against Cassandra.
    """

    name: str
    ops: list[Op]
    expect: dict[int, list[dict[str, Any]]] | list[dict[str, Any]]
    table: str = "kv"
    ops_at: dict[int, int] = field(default_factory=dict)
    clocked: bool = False
    oracle_rows: bool = True

    def reads(self) -> dict[int, list[dict[str, Any]]]:
        return self.expect if isinstance(self.expect, dict) else {NOW: self.expect}

    def rows_at(self, now: int) -> list[dict[str, Any]]:
        """The rows expected at ``now`` (the latest read at or before it)."""
        reads = self.reads()
        return reads[max(t for t in reads if t <= now)]

    @property
    def runs_as_cql(self) -> bool:
        return all(has_cql(op) for op in self.ops)

    @property
    def ttl(self) -> int:
        return max((ttl_of(op) for op in self.ops), default=0)


def case_events(case: Case, schema: TableSchema) -> list[dict[str, Any]]:
    """The case's raw events as the pure tests build them (node clock ``NOW`` unless ``ops_at``)."""
    maker = EventMaker(schema)
    out: list[dict[str, Any]] = []
    for i, op in enumerate(case.ops):
        clock = NOW * 10**6 + i * 1000 if case.clocked else None
        out += maker.events(op, now=case.ops_at.get(i, NOW), clock_micros=clock)
    return out


def row(ck: int | None = 1, **values: Any) -> dict[str, Any]:
    """A kv/coll row of partition 1 (``ck`` None: the static-only row) with its non-null values."""
    out: dict[str, Any] = {"pk": 1}
    if ck is not None:
        out["ck"] = ck
    out.update(values)
    return out


def mix(c1: int, c2: int, c3: str, v: int) -> dict[str, Any]:
    return {"pk": 1, "c1": c1, "c2": c2, "c3": c3, "v": v}


def ins(ck: int, ts: int = 10, ttl: int = 0, **values: Any) -> Write:
    return Write(1, (ck,), values, ts=ts, ttl=ttl, insert=True)


def upd(ck: int, ts: int = 10, ttl: int = 0, **values: Any) -> Write:
    return Write(1, (ck,), values, ts=ts, ttl=ttl)


def inc(column: str, delta: int, ts: int = 10, ck: int = 1) -> Increment:
    return Increment(1, (ck,), column, delta, ts=ts)


FIVE_ROWS = [ins(ck, v=ck) for ck in range(1, 6)]
MIX_ROWS = [
    Write(1, (c1, c2, c3), {"v": 100 * c1 + 10 * c2}, ts=10, insert=True)
    for c1, c2, c3 in [
        (1, 1, "a"),
        (1, 2, "a"),
        (1, 3, "a"),
        (1, 3, "b"),
        (1, 3, "c"),
        (1, 4, "a"),
        (2, 2, "a"),
    ]
]


def mix_rows(*keys: tuple[int, int, str]) -> list[dict[str, Any]]:
    return [mix(c1, c2, c3, 100 * c1 + 10 * c2) for c1, c2, c3 in keys]


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
        "equal timestamps: a tombstone beats a live cell written after it",
        [DeleteColumns(1, (1,), ("v",), ts=10), upd(1, v=5)],
        [],
    ),
    Case(
        "equal timestamps: an expiring cell beats a live one, then expires",
        [ins(1, v=9), upd(1, ttl=2, v=1)],
        {NOW: [row(v=1)], NOW + 1: [row(v=1)], NOW + 2: [row()]},
    ),
    Case(
        "equal timestamps: a tombstone beats an expiring cell",
        [upd(1, ttl=2, v=1), DeleteColumns(1, (1,), ("v",), ts=10)],
        [],
    ),
    Case(
        "equal timestamps, both expiring: the later expiry wins over the greater value",
        [upd(1, ttl=1, v=2), upd(1, ttl=2, v=1)],
        {NOW: [row(v=1)], NOW + 1: [row(v=1)], NOW + 2: []},
    ),
    Case(
        "equal timestamps, same expiry: the greater value wins",
        [upd(1, ttl=2, v=1), upd(1, ttl=2, v=2)],
        {NOW: [row(v=2)], NOW + 2: []},
    ),
    Case(
        "equal timestamps: an expiring set element beats the live one",
        [AddElements(1, (1,), "st", {1, 2}, ts=10), AddElements(1, (1,), "st", {1}, ts=10, ttl=1)],
        {NOW: [row(st=[1, 2])], NOW + 1: [row(st=[2])]},
    ),
    Case(
        "equal timestamps: frozen UDTs compare by their serialized bytes",
        [
            Write(1, (1,), {"fu": {"street": "b", "nr": 1}}, ts=10),
            Write(1, (1,), {"fu": {"street": "a", "nr": 2}}, ts=10),
        ],
        [row(fu={"street": "b", "nr": 1})],
        table="coll",
    ),
    Case(
        "equal timestamps: tuples compare by their serialized bytes",
        [Write(1, (1,), {"tp": (2, "a")}, ts=10), Write(1, (1,), {"tp": (1, "z")}, ts=10)],
        [row(tp=(2, "a"))],
        table="coll",
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
        "late older rows and statics do not resurrect a deleted partition",
        [DeletePartition(1, ts=20), ins(1, 15, v=1), Write(1, (), {"s": 1}, ts=20), upd(2, 21, v=2)],
        [row(2, v=2)],
    ),
    Case(
        "a static column newer than a partition deletion shows alone",
        [ins(1, v=1, s=1), DeletePartition(1, ts=11), Write(1, (), {"s": 2}, ts=12)],
        [row(None, s=2)],
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
    Case(
        "range deletion ck > 2 AND ck < 4",
        [*FIVE_ROWS, DeleteRange(1, low=2, high=4, low_inclusive=False, high_inclusive=False, ts=11)],
        [row(1, v=1), row(2, v=2), row(4, v=4), row(5, v=5)],
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
        "late older rows stay under a range deletion",
        [DeleteRange(1, low=1, high=3, ts=20), ins(2, 15, v=2), ins(4, 15, v=4), upd(3, 21, v=3)],
        [row(3, v=3), row(4, v=4)],
    ),
    Case(
        "range deletion on a DESC column: ck >= 2 AND ck < 4",
        [*FIVE_ROWS, DeleteRange(1, low=2, high=4, high_inclusive=False, ts=11)],
        [row(5, v=5), row(4, v=4), row(1, v=1)],
        table="desc1",
    ),
    Case(
        "range deletion on a DESC column: ck > 2",
        [*FIVE_ROWS, DeleteRange(1, low=2, low_inclusive=False, ts=11)],
        [row(2, v=2), row(1, v=1)],
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
        "range deletion on a DESC column under a prefix: c1 = 1 AND c2 > 1 AND c2 <= 3",
        [*MIX_ROWS, DeleteRange(1, (1,), low=1, high=3, low_inclusive=False, ts=11)],
        mix_rows((1, 4, "a"), (1, 1, "a"), (2, 2, "a")),
        table="mix",
    ),
    Case(
        "open range on a DESC column under a prefix: c1 = 1 AND c2 < 3",
        [*MIX_ROWS, DeleteRange(1, (1,), high=3, high_inclusive=False, ts=11)],
        mix_rows((1, 4, "a"), (1, 3, "c"), (1, 3, "b"), (1, 3, "a"), (2, 2, "a")),
        table="mix",
    ),
    Case(
        "range on a third DESC column: c1 = 1 AND c2 = 3 AND c3 >= 'b' AND c3 < 'c'",
        [*MIX_ROWS, DeleteRange(1, (1, 3), low="b", high="c", high_inclusive=False, ts=11)],
        mix_rows((1, 4, "a"), (1, 3, "c"), (1, 3, "a"), (1, 2, "a"), (1, 1, "a"), (2, 2, "a")),
        table="mix",
    ),
    Case(
        "range deletion of a two-column prefix: c1 = 1 AND c2 = 3",
        [*MIX_ROWS, DeleteRange(1, (1, 3), ts=11)],
        mix_rows((1, 4, "a"), (1, 2, "a"), (1, 1, "a"), (2, 2, "a")),
        table="mix",
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
    Case(
        "a batch of [1, 3) at ts 11 and [3, 5] at ts 12 (logged as boundary markers)",
        [
            *FIVE_ROWS,
            upd(3, 11, v=33),
            Batch(
                [
                    DeleteRange(1, low=1, high=3, high_inclusive=False, ts=11),
                    DeleteRange(1, low=3, high=5, ts=12),
                ]
            ),
        ],
        [],
    ),
    Case(
        "a batch of [1, 3] at ts 11 and (3, 5) at ts 13: the older half lets a newer write live",
        [
            *FIVE_ROWS,
            upd(2, 12, v=22),
            upd(4, 12, v=44),
            Batch(
                [
                    DeleteRange(1, low=1, high=3, ts=11),
                    DeleteRange(1, low=3, high=5, low_inclusive=False, high_inclusive=False, ts=13),
                ]
            ),
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
        "a row made by INSERT stays when all its columns are deleted",
        [ins(1, v=1, w="x", st={1}), DeleteColumns(1, (1,), ("v", "w", "st"), ts=11)],
        [row()],
    ),
    Case(
        "a row made by UPDATE of a collection disappears with the collection",
        [AddElements(1, (1,), "st", {1}, ts=10), DeleteColumns(1, (1,), ("st",), ts=11)],
        [],
    ),
    Case(
        "INSERT USING TTL: the row expires with its cells",
        [ins(1, ttl=2, v=1)],
        {NOW: [row(v=1)], NOW + 1: [row(v=1)], NOW + 2: []},
    ),
    Case(
        "UPDATE USING TTL: the row lives as long as its cell",
        [upd(1, ttl=1, v=1, w="x")],
        {NOW: [row(v=1, w="x")], NOW + 1: []},
    ),
    Case(
        "a later UPDATE without TTL outlives a TTL'd INSERT",
        [ins(1, ttl=2, v=1, w="x"), upd(1, 11, w="y")],
        {NOW: [row(v=1, w="y")], NOW + 2: [row(w="y")]},
    ),
    Case(
        "a TTL'd UPDATE of one cell does not expire the INSERT's row",
        [ins(1, v=1, w="x"), upd(1, 11, ttl=1, w="y")],
        {NOW: [row(v=1, w="y")], NOW + 1: [row(v=1)]},
    ),
    Case(
        "equal-timestamp row markers: the expiring one wins, so the row expires",
        [Write(1, (1,), {}, ts=10, insert=True), Write(1, (1,), {}, ts=10, ttl=2, insert=True)],
        {NOW: [row()], NOW + 2: []},
    ),
    Case(
        "TTL counts from the writing node's clock",
        [ins(1, ttl=2, v=1)],
        {NOW + 51: [row(v=1)], NOW + 52: []},
        ops_at={0: NOW + 50},
    ),
    # -- static columns
    Case(
        "static columns alone read as one row with null clustering",
        [Write(1, (), {"s": 7}, ts=10)],
        [row(None, s=7)],
    ),
    Case(
        "INSERT of the key and a static column reads as the static-only row",
        [Write(1, (), {"s": 7}, ts=10, insert=True)],
        [row(None, s=7)],
    ),
    Case(
        "static columns appear in every row",
        [ins(1, v=1), ins(2, v=2), Write(1, (), {"s": 7}, ts=11)],
        [row(1, v=1, s=7), row(2, v=2, s=7)],
    ),
    Case(
        "an expiring static column",
        [Write(1, (), {"s": 7}, ts=10, ttl=2)],
        {NOW: [row(None, s=7)], NOW + 2: []},
    ),
    Case(
        "the static-only row goes when a row appears",
        [Write(1, (), {"s": 7}, ts=10), upd(2, 11, v=2)],
        [row(2, v=2, s=7)],
    ),
    Case(
        "deleting a static column leaves the rows",
        [ins(1, v=1), Write(1, (), {"s": 5}, ts=10), DeleteColumns(1, (), ("s",), ts=11)],
        [row(1, v=1)],
    ),
    Case(
        "a static list survives row deletions and goes with the partition",
        [
            Write(1, (1,), {"v": 1}, ts=10, insert=True),
            Write(1, (), {"sl": [1]}, ts=10),
            AddElements(1, (), "sl", [2], ts=11),
            DeleteRow(1, (1,), ts=12),
        ],
        [row(None, sl=[1, 2])],
        table="coll",
        clocked=True,
    ),
    Case(
        "a partition deletion removes a static list",
        [Write(1, (), {"sl": [1]}, ts=10), AddElements(1, (), "sl", [2], ts=11), DeletePartition(1, ts=11)],
        [],
        table="coll",
        clocked=True,
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
        oracle_rows=False,  # Cassandra names elements by the clock when the statement runs, not by ts
    ),
    Case(
        "list elements are ordered by when their statements ran",
        [
            AddElements(1, (1,), "l", [3], ts=30),
            AddElements(1, (1,), "l", [1, 2], ts=10),
            AddElements(1, (1,), "l", [9], ts=20),
        ],
        [row(l=[3, 1, 2, 9])],
        clocked=True,
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
    Case(
        "late older elements stay under a collection deletion",
        [
            DeleteColumns(1, (1,), ("m", "l"), ts=20),
            AddElements(1, (1,), "m", {"a": 1}, ts=15),
            AddElements(1, (1,), "l", [1], ts=15),
            AddElements(1, (1,), "m", {"b": 2}, ts=25),
        ],
        [row(m={"b": 2})],
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
        "deleting a UDT column deletes its fields up to its timestamp",
        [
            SetField(1, (1,), "a", "street", "x", ts=10),
            DeleteColumns(1, (1,), ("a",), ts=11),
            SetField(1, (1,), "a", "nr", 5, ts=12),
        ],
        [row(a={"street": None, "nr": 5})],
    ),
    Case(
        "an expiring UDT field",
        [SetField(1, (1,), "a", "street", "x", ts=10), SetField(1, (1,), "a", "nr", 5, ts=10, ttl=1)],
        {NOW: [row(a={"street": "x", "nr": 5})], NOW + 1: [row(a={"street": "x", "nr": None})]},
    ),
    Case(
        "collection elements expire one by one",
        [AddElements(1, (1,), "st", {1}, ts=10, ttl=1), AddElements(1, (1,), "st", {2}, ts=10)],
        {NOW: [row(st=[1, 2])], NOW + 1: [row(st=[2])]},
    ),
    Case(
        "a list overwritten, appended to and prepended to",
        [
            AddElements(1, (1,), "l", ["x"], ts=9),
            Write(1, (1,), {"l": ["b"]}, ts=10),
            AddElements(1, (1,), "l", ["c", "d"], ts=10),
            Prepend(1, (1,), "l", ["a0", "a1"], ts=11),
        ],
        [row(l=["a0", "a1", "b", "c", "d"])],
        table="coll",
        clocked=True,
    ),
    Case(
        "the later prepend comes first",
        [Prepend(1, (1,), "l", ["x"], ts=10), Prepend(1, (1,), "l", ["y"], ts=9)],
        [row(l=["y", "x"])],
        table="coll",
        clocked=True,
    ),
    Case(
        "an older list overwrite keeps the newer elements",
        [AddElements(1, (1,), "l", ["new"], ts=20), Write(1, (1,), {"l": ["old"]}, ts=10)],
        [row(l=["new", "old"])],
        table="coll",
        clocked=True,
    ),
    Case(
        "setting list elements by index, an older one losing",
        [
            Write(1, (1,), {"l": ["a", "b", "c"]}, ts=10),
            SetIndex(1, (1,), "l", 1, "B", ts=11),
            SetIndex(1, (1,), "l", 0, "Z", ts=9),
        ],
        [row(l=["a", "B", "c"])],
        table="coll",
        clocked=True,
    ),
    Case(
        "deleting a list element by index",
        [Write(1, (1,), {"l": ["a", "b", "c"]}, ts=10), DeleteIndex(1, (1,), "l", 1, ts=11)],
        [row(l=["a", "c"])],
        table="coll",
        clocked=True,
    ),
    Case(
        "removing list elements by value, an older removal doing nothing",
        [
            Write(1, (1,), {"l": ["a", "b", "a", "c"]}, ts=10),
            RemoveFromList(1, (1,), "l", ["a"], ts=11),
            RemoveFromList(1, (1,), "l", ["b"], ts=9),
        ],
        [row(l=["b", "c"])],
        table="coll",
        clocked=True,
    ),
    Case(
        "a list emptied element by element leaves no row after UPDATE",
        [Write(1, (1,), {"l": ["a"]}, ts=10), DeleteIndex(1, (1,), "l", 0, ts=11)],
        [],
        table="coll",
        clocked=True,
    ),
    Case(
        "frozen values are one cell: the newest whole value wins",
        [
            Write(1, (1,), {"fl": [1, 2], "fm": {"a": 1}, "fu": {"street": "x", "nr": 1}}, ts=10),
            Write(1, (1,), {"fl": [3], "fm": {"b": 2, "c": 3}}, ts=11),
            Write(1, (1,), {"fl": [9, 9], "fm": {"z": 9}, "fu": {"street": "z"}}, ts=9),
        ],
        [row(fl=[3], fm={"b": 2, "c": 3}, fu={"street": "x", "nr": 1})],
        table="coll",
    ),
    Case(
        "frozen UDTs and tuples with null parts",
        [ins(1, fu={"street": "x"}, tp=(1, None))],
        [row(fu={"street": "x", "nr": None}, tp=(1, None))],
        table="coll",
    ),
    Case(
        "an expiring frozen value and an expiring tuple",
        [ins(1, v=1), upd(1, 11, ttl=1, fl=[1], tp=(1, "a"))],
        {NOW: [row(v=1, fl=[1], tp=(1, "a"))], NOW + 1: [row(v=1)]},
        table="coll",
    ),
    # -- counters
    Case(
        "counter increments add up",
        [inc("c", 5), inc("c", 3), inc("d", -2), inc("c", -1, ck=2)],
        [row(c=8, d=-2), row(2, c=-1)],
        table="cnt",
    ),
    Case("a counter back at zero is still there", [inc("c", 1), inc("c", -1)], [row(c=0)], table="cnt"),
    Case(
        "a deleted counter row",
        [inc("c", 5), inc("d", 1), DeleteRow(1, (1,), ts=20), inc("c", 2, ck=2)],
        [row(2, c=2)],
        table="cnt",
    ),
    Case(
        "a deleted counter stays deleted: its tombstone beats later increments",
        [inc("c", 5), DeleteColumns(1, (1,), ("c",), ts=20), inc("c", 2, ts=30), inc("d", 1, ts=30)],
        [row(d=1)],
        table="cnt",
    ),
    # -- schema
    Case(
        "a re-added column hides its cells written before the drop",
        [ins(1, 50_000, v=1, w=1), upd(1, 100_000, w=2)],
        [row(v=1)],
        table="readd_ms",
    ),
    Case(
        "a re-added column shows cells written after the drop",
        [ins(1, 50_000, v=1, w=1), upd(1, 100_001, w=3)],
        [row(v=1, w=3)],
        table="readd_ms",
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

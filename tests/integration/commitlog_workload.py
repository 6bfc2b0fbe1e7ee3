"""A CQL workload whose every statement records what the commit log must then contain.

The acceptance tests run it against real Cassandra nodes and compare the decoder's output, mutation by
mutation, with the records. Expectations are derived from what the client sends (bound values, chosen
timestamps and TTLs) and from Cassandra's documented write semantics; only what the client cannot know is
asked of Cassandra afterwards (LWT write times via WRITETIME, counter totals via SELECT) or taken from an
earlier, already checked mutation (the timeuuid path of an existing list element).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import math
import os
import struct
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import groupby
from typing import Any

from cassandra.query import PreparedStatement
from cassandra.util import Duration as DriverDuration
from cassandra.util import Time as DriverTime

from cassandra_model.cql_types import CqlTime, Duration, ListType, counter_shards
from cassandra_model.errors import ValueDecodeError
from cassandra_model.partition_update import (
    NO_DELETION_TIME,
    BoundKind,
    Cell,
    DeletionTime,
    PartitionUpdate,
    RangeTombstoneBound,
    RangeTombstoneBoundary,
    Row,
)

# ---------------------------------------------------------------------------------------------------------
# expected-value records


@dataclass(frozen=True, slots=True)
class NewListElement:
    """The path of a list element the write creates: a fresh timeuuid only the server knows."""


@dataclass(frozen=True, slots=True)
class ExistingListElement:
    """The path of an element already in the list, by index or by value (Cassandra reads before writing)."""

    index: int | None = None
    value: Any = None


NEW_ELEMENT = NewListElement()


@dataclass(frozen=True, slots=True)
class CounterIncrement:
    """A counter cell's expectation: the delta the statement added, and the total SELECT read afterwards.

    The log holds one shard, the leader replica's own, with that shard's new running total (§7.13). On one
    node that is the counter's total; in a cluster the leaders' shard totals add up to it.
    """

    delta: int
    total: int


@dataclass(slots=True)
class ExpectedCell:
    """One cell. ``timestamp`` None: server-chosen, must fall in the operation's write window.

    ``path`` is None for a simple column, else the decoded element key (set element, map key, UDT field
    name) or a list-element marker. ``dropped`` cells belong to a column dropped later: they decode only
    with a schema from before the drop (Cassandra discards cells older than the drop, format notes §8).
    """

    column: str
    value: Any
    timestamp: int | None
    ttl: int = 0
    tombstone: bool = False
    path: Any = None
    dropped: bool = False


@dataclass(slots=True)
class ExpectedRow:
    """A row (or the static row): ``liveness`` is (timestamp, ttl) for INSERTs, ``deletion`` a timestamp."""

    clustering: tuple[Any, ...] = ()
    liveness: tuple[int, int] | None = None
    deletion: int | None = None
    complex_deletions: dict[str, int] = field(default_factory=dict)
    cells: list[ExpectedCell] = field(default_factory=list)


@dataclass(slots=True)
class ExpectedBound:
    """A range tombstone marker: kind, clustering prefix and deletion time.

    A boundary (where one range ends and the next starts) also has the deletion time of the range it opens.
    """

    kind: BoundKind
    clustering: tuple[Any, ...]
    timestamp: int
    next_timestamp: int | None = None


@dataclass(slots=True)
class ExpectedUpdate:
    """What one mutation must hold for one table and partition key."""

    table: str
    key: tuple[Any, ...]
    cdc: bool = True
    counter: bool = False
    partition_deletion: int | None = None
    static: ExpectedRow | None = None
    rows: list[ExpectedRow] = field(default_factory=list)
    bounds: list[ExpectedBound] = field(default_factory=list)


@dataclass(slots=True)
class ListState:
    """The values a list column must hold, in list order, once an operation's mutation is applied."""

    table: str
    key: tuple[Any, ...]
    column: str
    values: list[Any]


@dataclass(slots=True)
class Operation:
    """One statement: its commit-log mutation (``updates``, empty for DDL) and its wall-clock window."""

    name: str
    statement: str
    updates: list[ExpectedUpdate]
    started: float
    finished: float
    list_after: ListState | None = None

    def window_s(self) -> tuple[int, int]:
        """Seconds a local deletion time (Cassandra's nowInSec) may take during this operation."""
        return math.floor(self.started) - 1, math.ceil(self.finished) + 1

    def window_us(self) -> tuple[int, int]:
        """Microseconds a server-chosen write timestamp may take during this operation."""
        return int(self.started * 1e6) - 50_000, int(self.finished * 1e6) + 50_000


# ---------------------------------------------------------------------------------------------------------
# the schema


def _same(value: Any) -> Any:
    return value


def _float32(value: float) -> float:
    return struct.unpack(">f", struct.pack(">f", value))[0]


def _utf8(value: str) -> bytes:
    return value.encode("utf-8")


def _time(value: DriverTime) -> CqlTime:
    return CqlTime(value.nanosecond_time)


def _duration(value: DriverDuration) -> Duration:
    return Duration(value.months, value.days, value.nanoseconds)


def _inet(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(value)


def _timestamp(value: dt.datetime) -> dt.datetime:
    return value.astimezone(dt.UTC)


def _vector(value: Sequence[float]) -> list[float]:
    return [_float32(v) for v in value]


def _text_set(value: Iterable[str]) -> list[str]:
    """A frozen set<text> decodes as a list in Cassandra's element order: UTF-8 byte order."""
    return sorted(value, key=_utf8)


def _text_map(value: dict[str, int]) -> dict[str, int]:
    return dict(sorted(value.items(), key=lambda item: _utf8(item[0])))


UDT_FIELDS = ("street", "zip", "phones")


def _udt(value: tuple[Any, ...]) -> dict[str, Any]:
    return {
        name: None if v is None else list(v) if name == "phones" else v
        for name, v in zip(UDT_FIELDS, value, strict=True)
    }


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """A column of ``all_types``: ``expect`` turns a bound value into its decoded shape (cql_types).

    ``complex`` names the kind of a multi-cell column; ``order`` is its element comparator as a sort key.
    """

    name: str
    cql: str
    expect: Callable[[Any], Any] = _same
    complex: str | None = None
    order: Callable[[Any], Any] = _same


ALL_TYPES: tuple[ColumnSpec, ...] = (
    ColumnSpec("c_ascii", "ascii"),
    ColumnSpec("c_bigint", "bigint"),
    ColumnSpec("c_blob", "blob"),
    ColumnSpec("c_boolean", "boolean"),
    ColumnSpec("c_date", "date"),
    ColumnSpec("c_decimal", "decimal"),
    ColumnSpec("c_double", "double"),
    ColumnSpec("c_duration", "duration", _duration),
    ColumnSpec("c_float", "float", _float32),
    ColumnSpec("c_inet", "inet", _inet),
    ColumnSpec("c_int", "int"),
    ColumnSpec("c_smallint", "smallint"),
    ColumnSpec("c_text", "text"),
    ColumnSpec("c_time", "time", _time),
    ColumnSpec("c_timestamp", "timestamp", _timestamp),
    ColumnSpec("c_timeuuid", "timeuuid"),
    ColumnSpec("c_tinyint", "tinyint"),
    ColumnSpec("c_uuid", "uuid"),
    ColumnSpec("c_varint", "varint"),
    ColumnSpec("c_vector", "vector<float, 3>", _vector),
    ColumnSpec("c_flist", "frozen<list<int>>", list),
    ColumnSpec("c_fset", "frozen<set<text>>", _text_set),
    ColumnSpec("c_fmap", "frozen<map<text, int>>", _text_map),
    ColumnSpec("c_tuple", "tuple<int, text>", tuple),
    ColumnSpec("c_fudt", "frozen<address>", _udt),
    ColumnSpec("c_list", "list<text>", complex="list"),
    ColumnSpec("c_set", "set<int>", complex="set"),
    ColumnSpec("c_map", "map<text, int>", complex="map", order=_utf8),
    ColumnSpec("c_udt", "address", complex="udt"),
)
ALL_TYPES_BY_NAME = {c.name: c for c in ALL_TYPES}

# more than 64 regular columns (the other column-subset encoding, §7.8) and a name that is not ASCII
WIDE_COLUMNS: tuple[tuple[str, str], ...] = (*((f"v{i}", "int") for i in range(70)), ("Ωmega", "text"))
WIDE_TTL = 86400


def quote(name: str) -> str:
    """A column name as CQL must spell it (quoted unless a plain lower-case identifier)."""
    plain = name.isascii() and name.isidentifier() and name == name.lower()
    return name if plain else '"' + name.replace('"', '""') + '"'


def schema_statements(keyspace: str, replication_factor: int = 1) -> list[str]:
    """The DDL of one workload run: every table is CDC-enabled except ``plain``."""
    columns = ",\n    ".join(f"{c.name} {c.cql}" for c in ALL_TYPES)
    wide = ", ".join(f"{quote(name)} {cql}" for name, cql in WIDE_COLUMNS)
    return [
        f"CREATE KEYSPACE {keyspace} WITH replication = "
        f"{{'class': 'SimpleStrategy', 'replication_factor': {replication_factor}}}",
        f"CREATE TYPE {keyspace}.address (street text, zip int, phones frozen<list<text>>)",
        f"CREATE TABLE {keyspace}.all_types (\n    id int PRIMARY KEY,\n    {columns}\n) WITH cdc = true",
        f"CREATE TABLE {keyspace}.events (tenant text, bucket int, ck1 int, ck2 text, s text STATIC, v text, "
        "n bigint, PRIMARY KEY ((tenant, bucket), ck1, ck2)) "
        "WITH CLUSTERING ORDER BY (ck1 ASC, ck2 DESC) AND cdc = true",
        f"CREATE TABLE {keyspace}.counters (id text PRIMARY KEY, hits counter, misses counter) WITH cdc = true",
        f"CREATE TABLE {keyspace}.plain (id int PRIMARY KEY, note text) WITH cdc = false",
        f"CREATE TABLE {keyspace}.wide (k int, c int, {wide}, PRIMARY KEY (k, c)) "
        f"WITH cdc = true AND default_time_to_live = {WIDE_TTL}",
    ]


# ---------------------------------------------------------------------------------------------------------
# expectations derived from statements


def insert_cells(
    spec: ColumnSpec, bound: Any, ts: int, ttl: int = 0
) -> tuple[list[ExpectedCell], int | None]:
    """The cells (and complex deletion time) of setting a whole column to ``bound``.

    A null simple value is a tombstone cell; setting a multi-cell column first deletes it at ts - 1,
    then writes one cell per element (a null UDT field writes nothing).
    """
    name = spec.name
    if spec.complex is None:
        if bound is None:
            return [ExpectedCell(name, None, ts, tombstone=True)], None
        return [ExpectedCell(name, spec.expect(bound), ts, ttl)], None
    if not bound:
        return [], ts - 1
    return element_cells(spec, bound, ts, ttl), ts - 1


def element_cells(spec: ColumnSpec, bound: Any, ts: int, ttl: int = 0) -> list[ExpectedCell]:
    """The element cells of a multi-cell value, in Cassandra's path order."""
    name = spec.name
    if spec.complex == "list":
        return [ExpectedCell(name, v, ts, ttl, path=NEW_ELEMENT) for v in bound]
    if spec.complex == "set":
        return [ExpectedCell(name, None, ts, ttl, path=e) for e in sorted(bound, key=spec.order)]
    if spec.complex == "map":
        items = sorted(bound.items(), key=lambda kv: spec.order(kv[0]))
        return [ExpectedCell(name, v, ts, ttl, path=k) for k, v in items]
    fields = _udt(bound)
    return [ExpectedCell(name, v, ts, ttl, path=f) for f, v in fields.items() if v is not None]


def slice_bounds(
    prefix: tuple[Any, ...],
    descending: bool,
    lower: tuple[Any, bool] | None,
    upper: tuple[Any, bool] | None,
    ts: int,
) -> list[ExpectedBound]:
    """The open and close markers of ``DELETE ... WHERE <prefix equalities> [AND one column range]``.

    In clustering order a DESC column runs from its upper value down to its lower one, so its upper
    restriction opens the range. A side without a restriction is bounded by the equality prefix alone,
    inclusively (an empty prefix is the bottom/top of the partition).
    """
    opening, closing = (upper, lower) if descending else (lower, upper)
    start_kind = BoundKind.INCL_START_BOUND if opening is None or opening[1] else BoundKind.EXCL_START_BOUND
    end_kind = BoundKind.INCL_END_BOUND if closing is None or closing[1] else BoundKind.EXCL_END_BOUND
    start = prefix if opening is None else (*prefix, opening[0])
    end = prefix if closing is None else (*prefix, closing[0])
    return [ExpectedBound(start_kind, start, ts), ExpectedBound(end_kind, end, ts)]


def touching(first: list[ExpectedBound], second: list[ExpectedBound]) -> list[ExpectedBound]:
    """Two ranges of one mutation where the first ends at the prefix the second starts at (§7.7).

    The writer then closes the first and opens the second with one boundary marker at that prefix.
    """
    end, start = first[1], second[0]
    assert end.clustering == start.clustering, "the ranges do not touch"
    kind = {
        (BoundKind.EXCL_END_BOUND, BoundKind.INCL_START_BOUND): BoundKind.EXCL_END_INCL_START_BOUNDARY,
        (BoundKind.INCL_END_BOUND, BoundKind.EXCL_START_BOUND): BoundKind.INCL_END_EXCL_START_BOUNDARY,
    }[(end.kind, start.kind)]
    return [first[0], ExpectedBound(kind, end.clustering, end.timestamp, start.timestamp), second[1]]


def events_order(clustering: tuple[int, str]) -> tuple[int, tuple[int, ...]]:
    """Sort key of an events row: ck1 ascending, then ck2 (text, DESC) by descending UTF-8 bytes."""
    return clustering[0], (*(-b for b in _utf8(clustering[1])), 1)  # 1 > any negated byte: "ba" < "b"


def row_1() -> dict[str, Any]:
    """Maximal and positive edge values, IPv4, unicode text."""
    return {
        "c_ascii": "plain ascii ~!",
        "c_bigint": 2**63 - 1,
        "c_blob": bytes(range(256)),
        "c_boolean": True,
        "c_date": dt.date(9999, 12, 31),
        "c_decimal": Decimal("3." + "14159265358979323846" * 5),
        "c_double": float("nan"),
        "c_duration": DriverDuration(14, 3, 4_000_000_005),
        "c_float": float("inf"),
        "c_inet": "192.168.0.254",
        "c_int": 2**31 - 1,
        "c_smallint": 2**15 - 1,
        "c_text": "héllo wörld ✓ 𝄞 日本語",
        "c_time": DriverTime(86_399_999_999_999),
        "c_timestamp": dt.datetime(2099, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC),
        "c_timeuuid": uuid.uuid1(),
        "c_tinyint": 127,
        "c_uuid": uuid.uuid4(),
        "c_varint": 2**200 + 12345,
        "c_vector": [1.5, -2.25, 3.4028234663852886e38],
        "c_flist": [1, -2, 2**31 - 1],
        "c_fset": {"b", "a", "é", "Z"},
        "c_fmap": {"b": 2, "a": -1, "é": 3},
        "c_tuple": (7, "seven"),
        "c_fudt": ("Main St 1", 12345, ["+1-555-0100", "+1-555-0199"]),
        "c_list": ["a", "b"],
        "c_set": {5, -3, 1},
        "c_map": {"a": 1, "b": 2},
        "c_udt": ("Elm", 10115, ["030-1234"]),
    }


def row_2() -> dict[str, Any]:
    """Minimal and negative edge values, IPv6, empty strings/blobs/collections, before-1970 times, nulls."""
    return {
        "c_ascii": "",
        "c_bigint": -(2**63),
        "c_blob": b"",
        "c_boolean": False,
        "c_date": dt.date(1969, 7, 20),
        "c_decimal": Decimal("-1.5E-1000"),
        "c_double": float("-inf"),
        "c_duration": DriverDuration(-1, -2, -3),
        "c_float": float("nan"),
        "c_inet": "2001:db8::ff00:42:8329",
        "c_int": -(2**31),
        "c_smallint": -(2**15),
        "c_text": "",
        "c_time": DriverTime(0),
        "c_timestamp": dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC),
        "c_timeuuid": uuid.uuid1(),
        "c_tinyint": -128,
        "c_uuid": uuid.UUID(int=0),
        "c_varint": -(2**300),
        "c_vector": [-0.0, 1.401298464324817e-45, -1.0],
        "c_flist": [],
        "c_fset": {"only"},
        "c_fmap": {"": 0},
        "c_tuple": (None, ""),
        "c_fudt": (None, -1, None),
        "c_list": [],
        "c_set": set(),
        "c_map": {},
        "c_udt": ("", None, []),
    }


# ---------------------------------------------------------------------------------------------------------
# running it


class Workload:
    """One keyspace, its DDL and its operations, run in order against one session.

    Statements are issued one at a time and each waits for its acknowledgement, so on one node the
    commit log holds their mutations in the order of ``operations``.
    """

    def __init__(
        self,
        session: Any,
        keyspace: str | None = None,
        *,
        beyond_2038: bool = False,
        replication_factor: int = 1,
    ) -> None:
        """``beyond_2038``: also write expirations past 2038 (only 5.0 in NONE mode, descriptor 8, can).

        ``replication_factor`` is 1 on a one-node cluster; on a larger one, make it the node count and
        write at consistency ALL, so that the node whose log is read holds every mutation, in order.
        """
        self.session = session
        self.keyspace = keyspace or f"rs_{uuid.uuid4().hex[:10]}"
        self.beyond_2038 = beyond_2038
        self.replication_factor = replication_factor
        self.operations: list[Operation] = []
        self._prepared: dict[str, PreparedStatement] = {}
        # explicit timestamps lie a minute in the past, before any server-chosen time (LWT, the drop); only
        # the one write meant to outlive the drop is dated in the future
        self._next_ts = time.time_ns() // 1000 - 60_000_000
        self._list = ["a", "b"]  # all_types.c_list of row 1, as the client's statements make it

    # -- helpers

    def ts(self) -> int:
        """A fresh explicit write timestamp (µs), increasing from one statement to the next."""
        self._next_ts += 1000
        return self._next_ts

    def execute(self, statement: str, params: Sequence[Any] = ()) -> tuple[float, float, Any]:
        if params:
            prepared = self._prepared.get(statement)
            if prepared is None:
                prepared = self._prepared[statement] = self.session.prepare(statement)
            started = time.time()
            result = self.session.execute(prepared, params)
        else:
            started = time.time()
            result = self.session.execute(statement)
        return started, time.time(), result

    def op(
        self,
        name: str,
        statement: str,
        params: Sequence[Any],
        updates: list[ExpectedUpdate],
        list_after: ListState | None = None,
    ) -> Operation:
        started, finished, _ = self.execute(statement, params)
        operation = Operation(name, statement, updates, started, finished, list_after)
        self.operations.append(operation)
        return operation

    def ddl(self, name: str, statement: str) -> Operation:
        return self.op(name, statement, (), [])

    def q(self, text: str) -> str:
        return text.replace("{ks}", self.keyspace)

    # -- the run

    def create_schema(self) -> None:
        for statement in schema_statements(self.keyspace, self.replication_factor):
            self.ddl("ddl", statement)

    def run(
        self,
        checkpoint: Callable[[str], None] = lambda _name: None,
        before_drop: Callable[[], None] = lambda: None,
    ) -> list[Operation]:
        """Every operation, with ``checkpoint`` called between groups and ``before_drop`` before the DROP."""
        self.create_schema()
        checkpoint("schema")
        self.all_types_inserts()
        checkpoint("inserts")
        self.cell_and_collection_updates()
        checkpoint("collections")
        self.events_operations()
        checkpoint("events")
        self.schema_evolution(before_drop)
        checkpoint("alter")
        self.mixed_lwt_and_counters()
        checkpoint("mixed")
        self.wide_rows()
        self.edge_timestamps_and_ttls()
        checkpoint("edges")
        self.large_values()
        checkpoint("large")
        return self.operations

    def all_types_inserts(self) -> None:
        for key, values in ((1, row_1()), (2, row_2())):
            ts = self.ts()
            row = ExpectedRow(liveness=(ts, 0))
            for spec in ALL_TYPES:
                cells, deleted_at = insert_cells(spec, values[spec.name], ts)
                row.cells += cells
                if deleted_at is not None:
                    row.complex_deletions[spec.name] = deleted_at
            names = ", ".join(c.name for c in ALL_TYPES)
            marks = ", ".join("?" for _ in ALL_TYPES)
            self.op(
                f"insert all types, row {key}",
                self.q(
                    f"INSERT INTO {{ks}}.all_types (id, {names}) VALUES (?, {marks}) USING TIMESTAMP {ts}"
                ),
                [key, *(values[c.name] for c in ALL_TYPES)],
                [ExpectedUpdate("all_types", (key,), rows=[row])],
                ListState("all_types", (1,), "c_list", list(self._list)) if key == 1 else None,
            )
        # nulls: a tombstone cell for a simple column, only a complex deletion for a collection
        ts = self.ts()
        row = ExpectedRow(liveness=(ts, 0))
        for name, value in (("c_text", None), ("c_int", 5), ("c_list", None)):
            cells, deleted_at = insert_cells(ALL_TYPES_BY_NAME[name], value, ts)
            row.cells += cells
            if deleted_at is not None:
                row.complex_deletions[name] = deleted_at
        self.op(
            "insert with nulls, row 3",
            self.q(
                f"INSERT INTO {{ks}}.all_types (id, c_text, c_int, c_list) VALUES (?, ?, ?, ?) USING TIMESTAMP {ts}"
            ),
            [3, None, 5, None],
            [ExpectedUpdate("all_types", (3,), rows=[row])],
        )

    def _update_row_1(
        self,
        name: str,
        assignment: str,
        params: Sequence[Any],
        cells: list[ExpectedCell],
        *,
        ts: int,
        ttl: int | None = None,
        complex_deletions: dict[str, int] | None = None,
        delete: bool = False,
    ) -> None:
        using = f"USING TTL {ttl} AND TIMESTAMP {ts}" if ttl is not None else f"USING TIMESTAMP {ts}"
        if delete:
            statement = f"DELETE {assignment} FROM {{ks}}.all_types {using} WHERE id = ?"
        else:
            statement = f"UPDATE {{ks}}.all_types {using} SET {assignment} WHERE id = ?"
        row = ExpectedRow(cells=cells, complex_deletions=complex_deletions or {})
        list_after = None
        if any(c.column == "c_list" for c in cells):
            list_after = ListState("all_types", (1,), "c_list", list(self._list))
        self.op(
            name, self.q(statement), [*params, 1], [ExpectedUpdate("all_types", (1,), rows=[row])], list_after
        )

    def cell_and_collection_updates(self) -> None:
        """UPDATEs write cells without row liveness; collection edits write element cells or tombstones."""
        t = self.ts()
        self._update_row_1("update one cell", "c_int = ?", [42], [ExpectedCell("c_int", 42, t)], ts=t)
        t = self.ts()
        tomb = ExpectedCell("c_ascii", None, t, tombstone=True)
        self._update_row_1("delete one cell", "c_ascii", [], [tomb], ts=t, delete=True)
        t = self.ts()
        self._update_row_1(
            "update one cell with TTL",
            "c_text = ?",
            ["expiring"],
            [ExpectedCell("c_text", "expiring", t, 600)],
            ts=t,
            ttl=600,
        )
        sets = ALL_TYPES_BY_NAME["c_set"]
        t = self.ts()
        self._update_row_1(
            "set add", "c_set = c_set + ?", [{100, -100}], element_cells(sets, {100, -100}, t), ts=t
        )
        t = self.ts()
        self._update_row_1(
            "set remove",
            "c_set = c_set - ?",
            [{5}],
            [ExpectedCell("c_set", None, t, tombstone=True, path=5)],
            ts=t,
        )
        t = self.ts()
        self._update_row_1(
            "set add with TTL", "c_set = c_set + ?", [{77}], element_cells(sets, {77}, t, 300), ts=t, ttl=300
        )
        t = self.ts()
        self._update_row_1(
            "map put", "c_map[?] = ?", ["new", 7], [ExpectedCell("c_map", 7, t, path="new")], ts=t
        )
        t = self.ts()
        self._update_row_1(
            "map remove key",
            "c_map[?]",
            ["a"],
            [ExpectedCell("c_map", None, t, tombstone=True, path="a")],
            ts=t,
            delete=True,
        )
        maps = ALL_TYPES_BY_NAME["c_map"]
        t = self.ts()
        new_map = {"y": 2, "x": 1}
        self._update_row_1(
            "map overwrite",
            "c_map = ?",
            [new_map],
            element_cells(maps, new_map, t),
            ts=t,
            complex_deletions={"c_map": t - 1},
        )
        lists = ALL_TYPES_BY_NAME["c_list"]
        t = self.ts()
        self._list = [*self._list, "c"]
        self._update_row_1(
            "list append", "c_list = c_list + ?", [["c"]], element_cells(lists, ["c"], t), ts=t
        )
        t = self.ts()
        self._list = ["z", *self._list]
        self._update_row_1(
            "list prepend", "c_list = ? + c_list", [["z"]], element_cells(lists, ["z"], t), ts=t
        )
        t = self.ts()
        self._list[1] = "X"
        cell = ExpectedCell("c_list", "X", t, path=ExistingListElement(index=1))
        self._update_row_1("list set by index", "c_list[1] = ?", ["X"], [cell], ts=t)
        t = self.ts()
        self._list.remove("b")
        cell = ExpectedCell("c_list", None, t, tombstone=True, path=ExistingListElement(value="b"))
        self._update_row_1("list remove value", "c_list = c_list - ?", [["b"]], [cell], ts=t)
        t = self.ts()
        self._update_row_1(
            "udt field", "c_udt.zip = ?", [99], [ExpectedCell("c_udt", 99, t, path="zip")], ts=t
        )
        t = self.ts()
        self._update_row_1(
            "delete a whole set", "c_set", [], [], ts=t, complex_deletions={"c_set": t}, delete=True
        )
        udts = ALL_TYPES_BY_NAME["c_udt"]
        t = self.ts()
        new_udt = ("Oak", None, ["1", "2"])
        self._update_row_1(
            "udt overwrite",
            "c_udt = ?",
            [new_udt],
            element_cells(udts, new_udt, t),
            ts=t,
            complex_deletions={"c_udt": t - 1},
        )

    def events_operations(self) -> None:
        """Static and clustered rows, and every kind of deletion, on a composite-key table."""
        acme1 = ("acme", 1)
        where_pk = "tenant = ? AND bucket = ?"
        t = self.ts()
        self.op(
            "events insert with static",
            self.q(
                f"INSERT INTO {{ks}}.events (tenant, bucket, ck1, ck2, s, v, n) VALUES (?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP {t}"
            ),
            [*acme1, 1, "a", "static-1", "v-1a", 1],
            [
                ExpectedUpdate(
                    "events",
                    acme1,
                    static=ExpectedRow(cells=[ExpectedCell("s", "static-1", t)]),
                    rows=[
                        ExpectedRow(
                            (1, "a"), (t, 0), cells=[ExpectedCell("n", 1, t), ExpectedCell("v", "v-1a", t)]
                        )
                    ],
                )
            ],
        )
        t = self.ts()
        batch_rows = [(1, "c"), (1, "e"), (2, "a"), (1, "b")]
        inserts = "".join(
            "INSERT INTO {ks}.events (tenant, bucket, ck1, ck2, v, n) VALUES (?, ?, ?, ?, ?, ?); "
            for _ in batch_rows
        )
        params: list[Any] = []
        rows = []
        for i, (ck1, ck2) in enumerate(batch_rows):
            params += [*acme1, ck1, ck2, f"v-{ck1}{ck2}", 10 + i]
            rows.append(
                ExpectedRow(
                    (ck1, ck2),
                    (t, 0),
                    cells=[ExpectedCell("n", 10 + i, t), ExpectedCell("v", f"v-{ck1}{ck2}", t)],
                )
            )
        rows.sort(key=lambda r: events_order(r.clustering))  # one mutation: rows in clustering order
        self.op(
            "events batch of rows in one partition",
            self.q(f"BEGIN UNLOGGED BATCH USING TIMESTAMP {t} {inserts}APPLY BATCH"),
            params,
            [ExpectedUpdate("events", acme1, rows=rows)],
        )
        t = self.ts()
        self.op(
            "static column update",
            self.q(f"UPDATE {{ks}}.events USING TIMESTAMP {t} SET s = ? WHERE {where_pk}"),
            ["static-2", *acme1],
            [ExpectedUpdate("events", acme1, static=ExpectedRow(cells=[ExpectedCell("s", "static-2", t)]))],
        )
        t = self.ts()
        self.op(
            "events delete cell",
            self.q(
                f"DELETE v FROM {{ks}}.events USING TIMESTAMP {t} WHERE {where_pk} AND ck1 = ? AND ck2 = ?"
            ),
            [*acme1, 1, "a"],
            [
                ExpectedUpdate(
                    "events",
                    acme1,
                    rows=[ExpectedRow((1, "a"), cells=[ExpectedCell("v", None, t, tombstone=True)])],
                )
            ],
        )
        t = self.ts()
        self.op(
            "events delete row",
            self.q(f"DELETE FROM {{ks}}.events USING TIMESTAMP {t} WHERE {where_pk} AND ck1 = ? AND ck2 = ?"),
            [*acme1, 1, "c"],
            [ExpectedUpdate("events", acme1, rows=[ExpectedRow((1, "c"), deletion=t)])],
        )
        ranges: list[tuple[str, str, list[Any], list[ExpectedBound]]] = []
        t = self.ts()
        ranges.append(
            (
                "range ck1 = 1 AND 'b' < ck2 <= 'd' (ck2 DESC)",
                "ck1 = ? AND ck2 > ? AND ck2 <= ?",
                [1, "b", "d"],
                slice_bounds((1,), True, ("b", False), ("d", True), t),
            )
        )
        t = self.ts()
        ranges.append(("range ck1 = 2 (prefix)", "ck1 = ?", [2], slice_bounds((2,), False, None, None, t)))
        t = self.ts()
        ranges.append(
            ("range ck1 >= 5 (open end)", "ck1 >= ?", [5], slice_bounds((), False, (5, True), None, t))
        )
        t = self.ts()
        ranges.append(
            ("range ck1 < 0 (open start)", "ck1 < ?", [0], slice_bounds((), False, None, (0, False), t))
        )
        for name, restriction, values, bounds in ranges:
            self.op(
                f"events delete {name}",
                self.q(
                    f"DELETE FROM {{ks}}.events USING TIMESTAMP {bounds[0].timestamp} WHERE {where_pk} AND {restriction}"
                ),
                [*acme1, *values],
                [ExpectedUpdate("events", acme1, bounds=bounds)],
            )
        acme2 = ("acme", 2)
        t = self.ts()
        self.op(
            "events insert with TTL",
            self.q(
                "INSERT INTO {ks}.events (tenant, bucket, ck1, ck2, s, v, n) VALUES (?, ?, ?, ?, ?, ?, ?) "
                f"USING TTL 3600 AND TIMESTAMP {t}"
            ),
            [*acme2, 5, "t", "static-ttl", "v-ttl", 5],
            [
                ExpectedUpdate(
                    "events",
                    acme2,
                    static=ExpectedRow(cells=[ExpectedCell("s", "static-ttl", t, 3600)]),
                    rows=[
                        ExpectedRow(
                            (5, "t"),
                            (t, 3600),
                            cells=[ExpectedCell("n", 5, t, 3600), ExpectedCell("v", "v-ttl", t, 3600)],
                        )
                    ],
                )
            ],
        )
        t = self.ts()
        self.op(
            "events update cell with TTL",
            self.q(
                f"UPDATE {{ks}}.events USING TTL 600 AND TIMESTAMP {t} SET n = ? WHERE {where_pk} AND ck1 = ? AND ck2 = ?"
            ),
            [6, *acme2, 5, "t"],
            [
                ExpectedUpdate(
                    "events", acme2, rows=[ExpectedRow((5, "t"), cells=[ExpectedCell("n", 6, t, 600)])]
                )
            ],
        )
        self.events_statics_and_boundaries()
        t = self.ts()
        self.op(
            "events delete partition",
            self.q(f"DELETE FROM {{ks}}.events USING TIMESTAMP {t} WHERE {where_pk}"),
            list(acme1),
            [ExpectedUpdate("events", acme1, partition_deletion=t)],
        )

    def events_statics_and_boundaries(self) -> None:
        where_pk = "tenant = ? AND bucket = ?"
        acme5 = ("acme", 5)
        t = self.ts()
        self.op(
            "events insert of a static column only",
            self.q(f"INSERT INTO {{ks}}.events (tenant, bucket, s) VALUES (?, ?, ?) USING TIMESTAMP {t}"),
            [*acme5, "static only"],
            # only the static row is written, and a static row never carries primary-key liveness
            [
                ExpectedUpdate(
                    "events", acme5, static=ExpectedRow(cells=[ExpectedCell("s", "static only", t)])
                )
            ],
        )
        t = self.ts()
        self.op(
            "events delete the static cell",
            self.q(f"DELETE s FROM {{ks}}.events USING TIMESTAMP {t} WHERE {where_pk}"),
            list(acme5),
            [
                ExpectedUpdate(
                    "events", acme5, static=ExpectedRow(cells=[ExpectedCell("s", None, t, tombstone=True)])
                )
            ],
        )
        # one mutation: partition deletion, two touching ranges (a boundary), a static cell, and a row
        # whose text clustering value is empty
        acme4 = ("acme", 4)
        t0, t1, t2, t3 = self.ts(), self.ts(), self.ts(), self.ts()
        first = slice_bounds((), False, (1, True), (3, False), t1)
        second = slice_bounds((), False, (3, True), (5, False), t2)
        statement = self.q(
            "BEGIN UNLOGGED BATCH "
            f"DELETE FROM {{ks}}.events USING TIMESTAMP {t0} WHERE {where_pk}; "
            f"DELETE FROM {{ks}}.events USING TIMESTAMP {t1} WHERE {where_pk} AND ck1 >= ? AND ck1 < ?; "
            f"DELETE FROM {{ks}}.events USING TIMESTAMP {t2} WHERE {where_pk} AND ck1 >= ? AND ck1 < ?; "
            "INSERT INTO {ks}.events (tenant, bucket, ck1, ck2, v) VALUES (?, ?, ?, ?, ?) "
            f"USING TIMESTAMP {t3}; "
            f"UPDATE {{ks}}.events USING TIMESTAMP {t3} SET s = ? WHERE {where_pk}; "
            "APPLY BATCH"
        )
        self.op(
            "events batch: partition deletion, touching ranges, static, empty clustering value",
            statement,
            [*acme4, *acme4, 1, 3, *acme4, 3, 5, *acme4, 6, "", "empty ck2", "static-4", *acme4],
            [
                ExpectedUpdate(
                    "events",
                    acme4,
                    partition_deletion=t0,
                    static=ExpectedRow(cells=[ExpectedCell("s", "static-4", t3)]),
                    rows=[ExpectedRow((6, ""), (t3, 0), cells=[ExpectedCell("v", "empty ck2", t3)])],
                    bounds=touching(first, second),
                )
            ],
        )

    def schema_evolution(self, before_drop: Callable[[], None]) -> None:
        """ADD a column, write it, DROP it.

        Cells older than the drop are discarded when read with the later schema; a cell written beforehand
        with a timestamp after the drop is kept, decoded with the dropped column's type (§8).
        """
        self.ddl("add column extra", self.q("ALTER TABLE {ks}.events ADD extra text"))
        acme3 = ("acme", 3)
        t = self.ts()
        cells = [ExpectedCell("extra", "soon dropped", t, dropped=True), ExpectedCell("v", "v-extra", t)]
        self.op(
            "events insert into the added column",
            self.q(
                f"INSERT INTO {{ks}}.events (tenant, bucket, ck1, ck2, v, extra) VALUES (?, ?, ?, ?, ?, ?) USING TIMESTAMP {t}"
            ),
            [*acme3, 1, "x", "v-extra", "soon dropped"],
            [ExpectedUpdate("events", acme3, rows=[ExpectedRow((1, "x"), (t, 0), cells=cells)])],
        )
        future = time.time_ns() // 1000 + 3_600_000_000  # an hour after the drop
        self.op(
            "events update of the added column, timestamped after the drop",
            self.q(
                f"UPDATE {{ks}}.events USING TIMESTAMP {future} SET extra = ? "
                "WHERE tenant = ? AND bucket = ? AND ck1 = ? AND ck2 = ?"
            ),
            ["from the future", *acme3, 2, "y"],
            [
                ExpectedUpdate(
                    "events",
                    acme3,
                    rows=[ExpectedRow((2, "y"), cells=[ExpectedCell("extra", "from the future", future)])],
                )
            ],
        )
        before_drop()
        self.ddl("drop column extra", self.q("ALTER TABLE {ks}.events DROP extra"))

    def mixed_lwt_and_counters(self) -> None:
        # one partition key in a CDC and a non-CDC table: one mutation holding both updates
        t = self.ts()
        self.op(
            "unlogged batch over a cdc and a non-cdc table",
            self.q(
                f"BEGIN UNLOGGED BATCH USING TIMESTAMP {t} "
                "UPDATE {ks}.all_types SET c_text = ? WHERE id = ?; "
                "INSERT INTO {ks}.plain (id, note) VALUES (?, ?); APPLY BATCH"
            ),
            ["batched", 4, 4, "not tracked"],
            [
                ExpectedUpdate(
                    "all_types", (4,), rows=[ExpectedRow(cells=[ExpectedCell("c_text", "batched", t)])]
                ),
                ExpectedUpdate(
                    "plain",
                    (4,),
                    cdc=False,
                    rows=[ExpectedRow(liveness=(t, 0), cells=[ExpectedCell("note", "not tracked", t)])],
                ),
            ],
        )
        self.lwt()
        self.counters()

    def _writetime(self, key: int, column: str) -> int:
        row = self.session.execute(
            self.q(f"SELECT WRITETIME({column}) FROM {{ks}}.all_types WHERE id = {key}")
        ).one()
        return int(row[0])

    def lwt(self) -> None:
        """LWTs cannot carry USING TIMESTAMP: the Paxos ballot's time is read back with WRITETIME."""
        statement = self.q("INSERT INTO {ks}.all_types (id, c_text, c_int) VALUES (?, ?, ?) IF NOT EXISTS")
        started, finished, result = self.execute(statement, [9, "lwt", 1])
        assert result.one()[0] is True, "the LWT INSERT was not applied"
        t = self._writetime(9, "c_text")
        assert t == self._writetime(9, "c_int"), "one LWT INSERT wrote two timestamps"
        row = ExpectedRow(
            liveness=(t, 0), cells=[ExpectedCell("c_int", 1, t), ExpectedCell("c_text", "lwt", t)]
        )
        self.operations.append(
            Operation(
                "LWT insert if not exists",
                statement,
                [ExpectedUpdate("all_types", (9,), rows=[row])],
                started,
                finished,
            )
        )
        statement = self.q("UPDATE {ks}.all_types SET c_int = ? WHERE id = ? IF c_int = ?")
        started, finished, result = self.execute(statement, [2, 9, 1])
        assert result.one()[0] is True, "the LWT UPDATE was not applied"
        t = self._writetime(9, "c_int")
        row = ExpectedRow(cells=[ExpectedCell("c_int", 2, t)])
        self.operations.append(
            Operation(
                "LWT update if", statement, [ExpectedUpdate("all_types", (9,), rows=[row])], started, finished
            )
        )

    def counters(self) -> None:
        """Counter updates cannot carry USING TIMESTAMP; SELECT gives the totals (see CounterIncrement)."""
        totals: dict[tuple[str, str], int] = {}
        steps = [
            ("page-a", {"hits": 5}),
            ("page-a", {"hits": -2, "misses": 1}),
            ("page-b", {"hits": 10}),
            ("page-a", {"hits": 100}),
        ]
        for key, deltas in steps:
            assignment = ", ".join(f"{c} = {c} + ?" for c in deltas)
            statement = self.q(f"UPDATE {{ks}}.counters SET {assignment} WHERE id = ?")
            started, finished, _ = self.execute(statement, [*deltas.values(), key])
            row = self.session.execute(
                self.q("SELECT hits, misses FROM {ks}.counters WHERE id = %s"), [key]
            ).one()
            cells = []
            for column, delta in sorted(deltas.items()):
                totals[(key, column)] = totals.get((key, column), 0) + delta
                selected = getattr(row, column)
                assert selected == totals[(key, column)], (
                    f"counter {key}.{column}: SELECT {selected}, sum of increments {totals[(key, column)]}"
                )
                cells.append(ExpectedCell(column, CounterIncrement(delta, selected), None))
            update = ExpectedUpdate("counters", (key,), counter=True, rows=[ExpectedRow(cells=cells)])
            self.operations.append(
                Operation(f"counter {key} {deltas}", statement, [update], started, finished)
            )
        # deleting a counter writes an ordinary tombstone cell, at a server-chosen timestamp
        statement = self.q("DELETE hits FROM {ks}.counters WHERE id = ?")
        started, finished, _ = self.execute(statement, ["page-b"])
        cell = ExpectedCell("hits", None, None, tombstone=True)
        update = ExpectedUpdate("counters", ("page-b",), counter=True, rows=[ExpectedRow(cells=[cell])])
        self.operations.append(Operation("counter delete", statement, [update], started, finished))

    def wide_rows(self) -> None:
        """Rows of 71, 5 and 61 of 71 header columns in one mutation: all, present-index and missing-index
        column subsets (§7.8). The table's default TTL makes every row and cell expire."""
        t = self.ts()
        shapes = [(1, WIDE_COLUMNS), (2, WIDE_COLUMNS[:5]), (3, (*WIDE_COLUMNS[:60], WIDE_COLUMNS[-1]))]
        inserts = []
        params: list[Any] = []
        rows = []
        for c, columns in shapes:
            names = ", ".join(quote(name) for name, _ in columns)
            inserts.append(f"INSERT INTO {{ks}}.wide (k, c, {names}) VALUES (?, ?{', ?' * len(columns)}); ")
            values = [f"Ω-{c}" if cql == "text" else c * 1000 + i for i, (_, cql) in enumerate(columns)]
            params += [1, c, *values]
            cells = [ExpectedCell(name, v, t, WIDE_TTL) for (name, _), v in zip(columns, values, strict=True)]
            rows.append(ExpectedRow((c,), (t, WIDE_TTL), cells=cells))
        self.op(
            "wide rows with column subsets",
            self.q(f"BEGIN UNLOGGED BATCH USING TIMESTAMP {t} {''.join(inserts)}APPLY BATCH"),
            params,
            [ExpectedUpdate("wide", (1,), rows=rows)],
        )

    def edge_timestamps_and_ttls(self) -> None:
        before_epoch = -1_000_000  # 1969-12-31T23:59:59Z: a timestamp delta of 9 bytes (§7.3)
        self.op(
            "insert with a timestamp before the epoch",
            self.q(f"INSERT INTO {{ks}}.all_types (id, c_text) VALUES (?, ?) USING TIMESTAMP {before_epoch}"),
            [5, "before the epoch"],
            [
                ExpectedUpdate(
                    "all_types",
                    (5,),
                    rows=[
                        ExpectedRow(
                            liveness=(before_epoch, 0),
                            cells=[ExpectedCell("c_text", "before the epoch", before_epoch)],
                        )
                    ],
                )
            ],
        )
        if not self.beyond_2038:
            return
        ttl = 630_720_000  # 20 years, the maximum: expires after 2038, an unsigned 32-bit deletion time
        t = self.ts()
        self.op(
            "insert expiring after 2038",
            self.q(
                f"INSERT INTO {{ks}}.all_types (id, c_int) VALUES (?, ?) USING TTL {ttl} AND TIMESTAMP {t}"
            ),
            [7, 2038],
            [
                ExpectedUpdate(
                    "all_types",
                    (7,),
                    rows=[ExpectedRow(liveness=(t, ttl), cells=[ExpectedCell("c_int", 2038, t, ttl)])],
                )
            ],
        )

    def large_values(self) -> None:
        """Three 3 MiB blobs: multi-byte lengths, big compressed sections, and a new segment (8 MiB each)."""
        for i in range(3):
            blob = os.urandom(3 << 20)
            t = self.ts()
            self.op(
                f"large blob {i}",
                self.q(f"UPDATE {{ks}}.all_types USING TIMESTAMP {t} SET c_blob = ? WHERE id = ?"),
                [blob, 6],
                [
                    ExpectedUpdate(
                        "all_types", (6,), rows=[ExpectedRow(cells=[ExpectedCell("c_blob", blob, t)])]
                    )
                ],
            )


# ---------------------------------------------------------------------------------------------------------
# comparing decoded updates with the records


def same_value(expected: Any, actual: Any) -> bool:
    """Typed equality: same Python types all the way down, NaN equals NaN, -0.0 differs from 0.0,
    decimals keep their scale, and dict/list/tuple order matters (it is Cassandra's element order)."""
    if type(expected) is not type(actual):
        return False
    if isinstance(expected, float):
        if math.isnan(expected):
            return math.isnan(actual)
        return expected == actual and math.copysign(1.0, expected) == math.copysign(1.0, actual)
    if isinstance(expected, Decimal):
        return expected.as_tuple() == actual.as_tuple()
    if isinstance(expected, list | tuple):
        return len(expected) == len(actual) and all(
            same_value(e, a) for e, a in zip(expected, actual, strict=True)
        )
    if isinstance(expected, dict):
        return same_value(list(expected.items()), list(actual.items()))
    if isinstance(expected, dt.datetime):
        return expected == actual and expected.utcoffset() == actual.utcoffset()
    return bool(expected == actual)


def _short(value: Any, limit: int = 300) -> str:
    """A repr short enough for an assertion message (values here reach megabytes)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _timeuuid_order(path: bytes) -> tuple[int, bytes]:
    return uuid.UUID(bytes=path).time, path


class _ListModel:
    """A list column's live elements (path -> (timestamp, value)), built from already checked mutations."""

    def __init__(self) -> None:
        self.cells: dict[bytes, tuple[int, Any]] = {}

    def ordered(self) -> list[tuple[bytes, Any]]:
        return [(p, v) for p, (_, v) in sorted(self.cells.items(), key=lambda kv: _timeuuid_order(kv[0]))]

    def path_of(self, ref: ExistingListElement) -> bytes | None:
        ordered = self.ordered()
        if ref.index is not None:
            return ordered[ref.index][0] if ref.index < len(ordered) else None
        return next((p for p, v in ordered if v == ref.value), None)

    def apply(self, row: Row, column: str) -> None:
        for deletion in row.complex_deletions:
            if deletion.column.name == column:
                stamp = deletion.deletion.marked_for_delete_at
                self.cells = {p: tv for p, tv in self.cells.items() if tv[0] > stamp}
        for cell in row.cells:
            if cell.column.name != column or cell.path is None:
                continue
            if cell.is_tombstone:
                self.cells.pop(cell.path, None)
            else:
                self.cells[cell.path] = (cell.timestamp, cell.value)


class LogCheck:
    """Compares the decoded updates of the workload keyspace with the operations, in log order."""

    def __init__(self, operations: Sequence[Operation], *, dropped_visible: bool) -> None:
        self.operations = [op for op in operations if op.updates]
        self.dropped_visible = dropped_visible
        self.lists: dict[tuple[str, bytes, str], _ListModel] = {}
        self.counters: dict[tuple[str, bytes, str], dict[uuid.UUID, int]] = {}

    def run(self, updates: Sequence[PartitionUpdate]) -> None:
        mutations = [list(group) for _, group in groupby(updates, key=lambda u: (u.segment, u.position))]
        for index, (op, mutation) in enumerate(zip(self.operations, mutations, strict=False)):
            self.check_mutation(op, mutation, index)
        described = [f"{m[0].segment}@{m[0].position}: {sorted(u.table for u in m)}" for m in mutations]
        assert len(mutations) == len(self.operations), (
            f"{len(mutations)} mutations decoded for the keyspace, {len(self.operations)} expected; "
            f"operations {[op.name for op in self.operations]}, decoded {described}"
        )

    def check_mutation(self, op: Operation, mutation: list[PartitionUpdate], index: int) -> None:
        where = f"operation {index} {op.name!r} ({op.statement})"
        decoded_tables = sorted(u.table for u in mutation)
        expected_tables = sorted(u.table for u in op.updates)
        assert decoded_tables == expected_tables, (
            f"{where}: expected updates of {expected_tables}, decoded {decoded_tables}"
        )
        by_table = {u.table: u for u in mutation}
        for expected in op.updates:
            self.check_update(op, expected, by_table[expected.table], where)

    def check_update(
        self, op: Operation, expected: ExpectedUpdate, update: PartitionUpdate, where: str
    ) -> None:
        where = f"{where}, table {expected.table} key {expected.key}"
        key = update.partition_key_values()
        assert same_value(expected.key, key), f"{where}: partition key decoded as {key!r}"
        assert update.schema.cdc is expected.cdc, (
            f"{where}: schema cdc flag {update.schema.cdc}, expected {expected.cdc}"
        )
        assert update.is_counter is expected.counter, (
            f"{where}: is_counter {update.is_counter}, expected {expected.counter}"
        )
        self.check_deletion(
            op, expected.partition_deletion, update.partition_deletion, f"{where}: partition deletion"
        )
        if expected.static is None:
            assert update.static_row is None, f"{where}: unexpected static row {update.static_row}"
        else:
            assert update.static_row is not None, f"{where}: static row missing"
            assert update.static_row.is_static, f"{where}: static row not flagged static"
            self.check_row(op, expected.static, update.static_row, update, f"{where}, static row")
        decoded_rows = [r.clustering for r in update.rows]
        expected_rows = [r.clustering for r in expected.rows]
        assert same_value(expected_rows, decoded_rows), (
            f"{where}: rows {expected_rows} expected, decoded {decoded_rows}"
        )
        for expected_row, row in zip(expected.rows, update.rows, strict=True):
            assert not row.is_static, f"{where}: regular row {row.clustering} flagged static"
            self.check_row(op, expected_row, row, update, f"{where}, row {expected_row.clustering}")
        self.check_bounds(op, expected.bounds, update, where)
        if op.list_after is not None and op.list_after.table == expected.table:
            self.check_list_state(op.list_after, update, where)

    def check_deletion(
        self, op: Operation, expected: int | None, decoded: DeletionTime | None, where: str
    ) -> None:
        if expected is None:
            assert decoded is None, f"{where}: expected none, decoded {decoded}"
            return
        assert decoded is not None, f"{where}: expected marked_for_delete_at {expected}, decoded none"
        assert decoded.marked_for_delete_at == expected, (
            f"{where}: expected marked_for_delete_at {expected}, decoded {decoded.marked_for_delete_at}"
        )
        low, high = op.window_s()
        assert low <= decoded.local_deletion_time <= high, (
            f"{where}: local_deletion_time {decoded.local_deletion_time} outside the write window {low}..{high}"
        )

    def check_row(
        self, op: Operation, expected: ExpectedRow, row: Row, update: PartitionUpdate, where: str
    ) -> None:
        low, high = op.window_s()
        if expected.liveness is None:
            assert row.timestamp is None, (
                f"{where}: unexpected row liveness at {row.timestamp} (ttl {row.ttl})"
            )
        else:
            ts, ttl = expected.liveness
            assert (row.timestamp, row.ttl) == (ts, ttl), (
                f"{where}: liveness (timestamp, ttl) expected {(ts, ttl)}, decoded {(row.timestamp, row.ttl)}"
            )
            if ttl:
                assert (
                    row.local_expiration_time is not None and low <= row.local_expiration_time - ttl <= high
                ), (
                    f"{where}: liveness expires at {row.local_expiration_time}, ttl {ttl}: not within {low}..{high} + ttl"
                )
            else:
                assert row.local_expiration_time is None, (
                    f"{where}: liveness without TTL expires at {row.local_expiration_time}"
                )
        self.check_deletion(op, expected.deletion, row.deletion, f"{where}: row deletion")
        assert not row.shadowable_deletion, f"{where}: unexpected shadowable deletion"
        decoded_complex = {d.column.name: d.deletion for d in row.complex_deletions}
        assert sorted(decoded_complex) == sorted(expected.complex_deletions), (
            f"{where}: complex deletions of {sorted(expected.complex_deletions)} expected, decoded {sorted(decoded_complex)}"
        )
        for column, stamp in expected.complex_deletions.items():
            self.check_deletion(op, stamp, decoded_complex[column], f"{where}: complex deletion of {column}")

        expected_cells = [c for c in expected.cells if self.dropped_visible or not c.dropped]
        columns = sorted({c.column for c in expected_cells})
        decoded_columns = sorted({c.column.name for c in row.cells})
        assert decoded_columns == columns, (
            f"{where}: cells of columns {columns} expected, decoded {decoded_columns}"
        )
        for column in columns:
            wanted = [c for c in expected_cells if c.column == column]
            got = [c for c in row.cells if c.column.name == column]
            assert len(got) == len(wanted), (
                f"{where}, column {column}: {len(wanted)} cells expected, {len(got)} decoded: "
                f"{_short([(c.path_value, c.value) for c in got])}"
            )
            model = self.lists.get((update.table, update.partition_key, column))
            shards = self.counters.setdefault((update.table, update.partition_key, column), {})
            for w, c in zip(wanted, got, strict=True):
                self.check_cell(op, w, c, model, shards, f"{where}, column {column}")
        touched = [c.column for c in row.cells] + [d.column for d in row.complex_deletions]
        for column in {c.name for c in touched if isinstance(c.type, ListType) and c.type.multi_cell}:
            self.lists.setdefault((update.table, update.partition_key, column), _ListModel()).apply(
                row, column
            )

    def check_cell(
        self,
        op: Operation,
        expected: ExpectedCell,
        cell: Cell,
        model: _ListModel | None,
        shards: dict[uuid.UUID, int],
        where: str,
    ) -> None:
        """``model``: the list column's elements so far; ``shards``: a counter's shard totals so far."""
        try:
            value, path_value = cell.value, cell.path_value
        except ValueDecodeError as exc:
            raise AssertionError(f"{where}: value does not decode: {exc}") from exc
        where = f"{where}, path {path_value!r}"
        if expected.timestamp is None:
            low, high = op.window_us()
            assert low <= cell.timestamp <= high, (
                f"{where}: server timestamp {cell.timestamp} outside the write window {low}..{high}"
            )
        else:
            assert cell.timestamp == expected.timestamp, (
                f"{where}: timestamp expected {expected.timestamp}, decoded {cell.timestamp}"
            )
        path = expected.path
        if path is None:
            assert cell.path is None, f"{where}: simple column decoded with a path"
        elif isinstance(path, NewListElement):
            assert isinstance(path_value, uuid.UUID) and path_value.version == 1, (
                f"{where}: list path is not a timeuuid"
            )
            assert model is None or cell.path not in model.cells, (
                f"{where}: a new list element reuses existing path {path_value}"
            )
        elif isinstance(path, ExistingListElement):
            known = None if model is None else model.path_of(path)
            assert known is not None, (
                f"{where}: no list element {path} in the decoded list {model and model.ordered()}"
            )
            assert cell.path == known, (
                f"{where}: expected the existing element's path {uuid.UUID(bytes=known)}, decoded {path_value}"
            )
        else:
            assert same_value(path, path_value), f"{where}: path expected {path!r}, decoded {path_value!r}"
        assert cell.is_tombstone is expected.tombstone, (
            f"{where}: tombstone flag {cell.is_tombstone}, expected {expected.tombstone}"
        )
        low, high = op.window_s()
        if expected.tombstone:
            assert cell.ttl == 0 and not cell.is_expiring, f"{where}: tombstone with ttl {cell.ttl}"
            assert low <= cell.local_deletion_time <= high, (
                f"{where}: tombstone local_deletion_time {cell.local_deletion_time} outside {low}..{high}"
            )
            assert cell.raw == b"", f"{where}: tombstone carries value bytes {cell.raw.hex()}"
            return
        assert cell.ttl == expected.ttl, f"{where}: ttl expected {expected.ttl}, decoded {cell.ttl}"
        if expected.ttl:
            assert cell.is_expiring, f"{where}: a cell with a TTL is not flagged expiring"
            expires = cell.local_deletion_time - expected.ttl
            assert low <= expires <= high, (
                f"{where}: local_deletion_time {cell.local_deletion_time} - ttl {expected.ttl} outside {low}..{high}"
            )
        else:
            assert not cell.is_expiring, f"{where}: a cell without TTL is flagged expiring"
            assert cell.local_deletion_time == NO_DELETION_TIME, (
                f"{where}: live cell local_deletion_time {cell.local_deletion_time}"
            )
        if isinstance(expected.value, CounterIncrement):
            self.check_counter(expected.value, cell, shards, where)
            return
        assert same_value(expected.value, value), (
            f"{where}: value expected {_short(expected.value)}, decoded {_short(value)}"
        )

    @staticmethod
    def check_counter(
        expected: CounterIncrement, cell: Cell, shards: dict[uuid.UUID, int], where: str
    ) -> None:
        logged = counter_shards(cell.raw)
        assert len(logged) == 1, f"{where}: a logged counter holds the leader's shard only, decoded {logged}"
        shard = logged[0]
        shards[shard.counter_id] = shards.get(shard.counter_id, 0) + expected.delta
        assert cell.value == shard.count == shards[shard.counter_id], (
            f"{where}: value {cell.value} (shard {shard}); the deltas led by {shard.counter_id} add up to "
            f"{shards[shard.counter_id]}"
        )
        assert sum(shards.values()) == expected.total, (
            f"{where}: the leaders' shard totals {shards} do not add up to SELECT's {expected.total}"
        )

    def check_bounds(
        self, op: Operation, expected: list[ExpectedBound], update: PartitionUpdate, where: str
    ) -> None:
        markers = update.range_tombstones
        described = [(m.kind.name, m.clustering) for m in markers]
        assert len(markers) == len(expected), (
            f"{where}: {len(expected)} range tombstone markers expected, decoded {described}"
        )
        for want, marker in zip(expected, markers, strict=True):
            assert marker.kind == want.kind, (
                f"{where}: marker kind {want.kind.name} expected, decoded {described}"
            )
            assert same_value(want.clustering, marker.clustering), (
                f"{where}: marker prefix {want.clustering} expected, decoded {described}"
            )
            what = f"{where}: range tombstone {want.kind.name} {want.clustering}"
            if isinstance(marker, RangeTombstoneBoundary):
                assert want.kind.is_boundary, f"{what}: decoded as a boundary {described}"
                self.check_deletion(op, want.timestamp, marker.end_deletion, f"{what}, closing")
                self.check_deletion(op, want.next_timestamp, marker.start_deletion, f"{what}, opening")
            else:
                assert isinstance(marker, RangeTombstoneBound) and not want.kind.is_boundary, what
                self.check_deletion(op, want.timestamp, marker.deletion, what)

    def check_list_state(self, state: ListState, update: PartitionUpdate, where: str) -> None:
        model = self.lists.get((update.table, update.partition_key, state.column))
        values = [] if model is None else [v for _, v in model.ordered()]
        assert values == state.values, (
            f"{where}: list {state.column} in timeuuid path order is {values}, the statements make it {state.values}"
        )

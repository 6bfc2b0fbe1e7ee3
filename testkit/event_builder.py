"""Raw events from simple Python descriptions of CQL writes, for merge tests (and for checking them
against a real Cassandra: every operation also renders the CQL statement that makes the same write).

An operation is a small dataclass (``Write``, ``DeleteRow``, ``DeleteRange``...); ``EventBuilder(schema)
.event(op, now=...)`` turns it into a raw event dict exactly as ``schemas.raw_event.raw_event_record``
builds one from a decoded commit log (it is round-tripped through the Avro schema to make sure), and
``op.cql(schema)`` gives the statement, with ``USING TIMESTAMP`` (and ``TTL``), that writes the same cells.

Values are Python values serialized with cassandra-driver's serializers for the column type; wrap bytes in
``Raw`` to write exact serialized bytes (an empty value, an unusual encoding).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from cassandra.encoder import Encoder

from cassandra_model.cql_types import CellLayout, CqlType, SerializedValue, UserType
from cassandra_model.table_schema import ClusteringOrder, ColumnSchema, TableSchema
from cassandra_model.value_serializer import native_bytes, serialize
from schemas.raw_event import RAW_FORMAT, decode_raw_event, encode_raw_event

NOW = 1_700_000_000
NO_DELETION_TIME = 2**31 - 1
EXCL_END, INCL_START, EXCL_END_INCL_START, INCL_END_EXCL_START, INCL_END, EXCL_START = 0, 1, 2, 5, 6, 7

Raw = SerializedValue


def timeuuid_path(micros: int, sequence: int = 0) -> bytes:
    """A version-1 UUID whose timestamp orders list elements by (write time, sequence)."""
    ticks = micros * 10 + sequence
    time_low = ticks & 0xFFFFFFFF
    time_mid = (ticks >> 32) & 0xFFFF
    time_hi = ((ticks >> 48) & 0x0FFF) | 0x1000
    return uuid.UUID(fields=(time_low, time_mid, time_hi, 0x80, 0x00, 0x0123456789AB)).bytes


# ---------------------------------------------------------------------------------------------------------
# operations


def _literal(value: Any) -> str:
    if isinstance(value, Raw):
        return "0x" + value.data.hex()
    return Encoder().cql_encode_all_types(value)


def _typed_literal(t: CqlType | None, value: Any) -> str:
    """A CQL literal, written by the column's type when it is known (UDTs as ``{field: value}``, tuples
    as ``(a, b)``)."""
    return _literal(value) if t is None else t.cql_literal(value, _literal)


def _column_type(schema: TableSchema, name: str) -> CqlType | None:
    column = schema.column(name)
    return None if column is None else column.type


def _where(schema: TableSchema, key: Any, clustering: Sequence[Any]) -> str:
    keys = key if isinstance(key, tuple) else (key,)
    parts = [f"{c.name} = {_literal(v)}" for c, v in zip(schema.partition_key, keys, strict=True)]
    parts += [f"{c.name} = {_literal(v)}" for c, v in zip(schema.clustering, clustering, strict=False)]
    return " AND ".join(parts)


def _using(ts: int, ttl: int = 0) -> str:
    return f"USING TIMESTAMP {ts}" + (f" AND TTL {ttl}" if ttl else "")


@dataclass
class Write:
    """INSERT (``insert=True``: writes the row's primary-key liveness) or UPDATE of some columns.

    A value None writes a tombstone (a null); a value of a non-frozen collection/UDT column overwrites it
    (complex deletion at ts-1, then the elements), as ``SET col = value`` does.
    """

    key: Any
    clustering: tuple[Any, ...] = ()
    values: dict[str, Any] = field(default_factory=dict)
    ts: int = 1
    ttl: int = 0
    insert: bool = False

    def cql(self, schema: TableSchema) -> str:
        if self.insert:
            names = [c.name for c in (*schema.partition_key, *schema.clustering[: len(self.clustering)])]
            keys = self.key if isinstance(self.key, tuple) else (self.key,)
            literals = [_literal(v) for v in (*keys, *self.clustering)]
            literals += [_typed_literal(_column_type(schema, n), v) for n, v in self.values.items()]
            names += list(self.values)
            return (
                f"INSERT INTO {schema.name} ({', '.join(names)}) VALUES "
                f"({', '.join(literals)}) {_using(self.ts, self.ttl)}"
            )
        sets = ", ".join(
            f"{n} = {_typed_literal(_column_type(schema, n), v)}" for n, v in self.values.items()
        )
        where = _where(schema, self.key, self.clustering)
        return f"UPDATE {schema.name} {_using(self.ts, self.ttl)} SET {sets} WHERE {where}"


@dataclass
class DeleteRow:
    key: Any
    clustering: tuple[Any, ...] = ()
    ts: int = 1

    def cql(self, schema: TableSchema) -> str:
        return (
            f"DELETE FROM {schema.name} {_using(self.ts)} WHERE {_where(schema, self.key, self.clustering)}"
        )


@dataclass
class DeletePartition:
    key: Any
    ts: int = 1

    def cql(self, schema: TableSchema) -> str:
        return f"DELETE FROM {schema.name} {_using(self.ts)} WHERE {_where(schema, self.key, ())}"


@dataclass
class DeleteColumns:
    """``DELETE a, b FROM ...``: tombstones for simple columns, complex deletions for collections."""

    key: Any
    clustering: tuple[Any, ...] = ()
    columns: tuple[str, ...] = ()
    ts: int = 1

    def cql(self, schema: TableSchema) -> str:
        return (
            f"DELETE {', '.join(self.columns)} FROM {schema.name} {_using(self.ts)} "
            f"WHERE {_where(schema, self.key, self.clustering)}"
        )


@dataclass
class DeleteRange:
    """``DELETE ... WHERE prefix = ... [AND c > / >= low] [AND c < / <= high]`` on the next clustering
    column ``c``; with neither bound, every row of the prefix."""

    key: Any
    prefix: tuple[Any, ...] = ()
    low: Any = None
    high: Any = None
    low_inclusive: bool = True
    high_inclusive: bool = True
    ts: int = 1

    def cql(self, schema: TableSchema) -> str:
        where = _where(schema, self.key, self.prefix)
        column = schema.clustering[len(self.prefix)].name if len(self.prefix) < len(schema.clustering) else ""
        if self.low is not None:
            where += f" AND {column} {'>=' if self.low_inclusive else '>'} {_literal(self.low)}"
        if self.high is not None:
            where += f" AND {column} {'<=' if self.high_inclusive else '<'} {_literal(self.high)}"
        return f"DELETE FROM {schema.name} {_using(self.ts)} WHERE {where}"


@dataclass
class RangeMarkers:
    """Range-tombstone markers as the commit log holds them: (kind, prefix values, ts[, opened ts])."""

    key: Any
    markers: list[tuple[Any, ...]] = field(default_factory=list)

    def cql(self, schema: TableSchema) -> str:
        raise NotImplementedError("raw markers have no single CQL statement")


@dataclass
class AddElements:
    """``SET col = col + {...}`` (set), ``col = col + {k: v}`` (map) or ``col = col + [...]`` (list)."""

    key: Any
    clustering: tuple[Any, ...] = ()
    column: str = ""
    elements: Any = None
    ts: int = 1
    ttl: int = 0

    def cql(self, schema: TableSchema) -> str:
        return (
            f"UPDATE {schema.name} {_using(self.ts, self.ttl)} SET {self.column} = {self.column} + "
            f"{_literal(self.elements)} WHERE {_where(schema, self.key, self.clustering)}"
        )


@dataclass
class RemoveElements:
    """``SET col = col - {...}``: set elements by value, map entries by key (a set of keys in CQL)."""

    key: Any
    clustering: tuple[Any, ...] = ()
    column: str = ""
    elements: Any = None
    ts: int = 1

    def cql(self, schema: TableSchema) -> str:
        return (
            f"UPDATE {schema.name} {_using(self.ts)} SET {self.column} = {self.column} - "
            f"{_literal(set(self.elements))} WHERE {_where(schema, self.key, self.clustering)}"
        )


@dataclass
class SetField:
    """``SET col.field = value`` on a non-frozen UDT column (None: a tombstone for the field)."""

    key: Any
    clustering: tuple[Any, ...] = ()
    column: str = ""
    field_name: str = ""
    value: Any = None
    ts: int = 1
    ttl: int = 0

    def cql(self, schema: TableSchema) -> str:
        return (
            f"UPDATE {schema.name} {_using(self.ts, self.ttl)} SET {self.column}.{self.field_name} = "
            f"{_literal(self.value)} WHERE {_where(schema, self.key, self.clustering)}"
        )


@dataclass
class CounterShard:
    """A counter cell as a replica logs it: one shard ``(counter id, clock, running count)``."""

    key: Any
    clustering: tuple[Any, ...] = ()
    column: str = ""
    counter_id: int = 1
    clock: int = 1
    count: int = 0
    ts: int = 1

    def cql(self, schema: TableSchema) -> str:
        raise NotImplementedError("a logged counter shard is not a CQL statement")


Operation = (
    Write
    | DeleteRow
    | DeletePartition
    | DeleteColumns
    | DeleteRange
    | RangeMarkers
    | AddElements
    | RemoveElements
    | SetField
    | CounterShard
)


def counter_context(shards: Sequence[tuple[int, int, int]]) -> bytes:
    """A CounterContext with global shards ``(counter id number, clock, count)``."""
    out = len(shards).to_bytes(2, "big")
    out += b"".join((i - 32768).to_bytes(2, "big", signed=True) for i in range(len(shards)))
    for counter_id, clock, count in shards:
        out += uuid.UUID(int=counter_id).bytes + clock.to_bytes(8, "big", signed=True)
        out += count.to_bytes(8, "big", signed=True)
    return out


# ---------------------------------------------------------------------------------------------------------
# building raw events


class EventBuilder:
    """Raw events for one table; ``node``/``segment_id`` only fill the event's source."""

    def __init__(self, schema: TableSchema, *, node: str = "n1", segment_id: int = 1) -> None:
        self.schema = schema
        self.node = node
        self.segment_id = segment_id
        self._offset = 0
        self._clock_micros: int | None = None

    # -- values

    def partition_key(self, key: Any) -> bytes:
        keys = key if isinstance(key, tuple) else (key,)
        parts = [serialize(c.type, v) for c, v in zip(self.schema.partition_key, keys, strict=True)]
        if len(parts) == 1:
            return parts[0]
        return b"".join(len(p).to_bytes(2, "big") + p + b"\x00" for p in parts)

    def clustering(self, values: Sequence[Any]) -> list[bytes | None]:
        return [
            None if v is None else serialize(c.type, v)
            for c, v in zip(self.schema.clustering, values, strict=False)
        ]

    def column(self, name: str) -> ColumnSchema:
        column = self.schema.static_columns.get(name) or self.schema.regular_columns.get(name)
        if column is None:
            raise KeyError(f"{self.schema.name} has no column {name}")
        return column

    # -- records

    @staticmethod
    def cell(
        column: str,
        value: bytes | None,
        ts: int,
        *,
        ttl: int = 0,
        now: int = NOW,
        path: bytes | None = None,
    ) -> dict[str, Any]:
        """A cell record: a tombstone when ``value`` is None, expiring when ``ttl``."""
        if value is None:
            return {
                "column": column,
                "path": path,
                "timestamp": ts,
                "ttl": 0,
                "local_deletion_time": now,
                "flags": 0x05,
                "value": b"",
            }
        flags = (0x02 if ttl else 0) | (0x04 if not value else 0)
        ldt = now + ttl if ttl else NO_DELETION_TIME
        return {
            "column": column,
            "path": path,
            "timestamp": ts,
            "ttl": ttl,
            "local_deletion_time": ldt,
            "flags": flags,
            "value": value,
        }

    @staticmethod
    def row(
        clustering: list[bytes | None],
        *,
        liveness: tuple[int, int, int | None] | None = None,
        deletion: tuple[int, int] | None = None,
        cells: list[dict[str, Any]] | None = None,
        complex_deletions: list[tuple[str, int, int]] | None = None,
    ) -> dict[str, Any]:
        return {
            "clustering": clustering,
            "liveness": None
            if liveness is None
            else {"timestamp": liveness[0], "ttl": liveness[1], "local_expiration_time": liveness[2]},
            "deletion": None
            if deletion is None
            else {"timestamp": deletion[0], "local_deletion_time": deletion[1]},
            "complex_deletions": [
                {"column": c, "deletion": {"timestamp": t, "local_deletion_time": d}}
                for c, t, d in (complex_deletions or [])
            ],
            "cells": cells or [],
        }

    def raw_event(
        self,
        key: Any,
        *,
        partition_deletion: tuple[int, int] | None = None,
        static_row: dict[str, Any] | None = None,
        rows: list[dict[str, Any]] | None = None,
        range_tombstones: list[dict[str, Any]] | None = None,
        is_counter: bool = False,
    ) -> dict[str, Any]:
        """A complete raw event (validated against the Avro schema) from its parts."""
        self._offset += 1
        body = {
            "format": RAW_FORMAT,
            "source": {
                "cluster": "test",
                "node": self.node,
                "segment_id": self.segment_id,
                "descriptor_version": 7,
                "entry_offset": self._offset,
                "position": self._offset + 1,
                "published_at_ms": 0,
            },
            "keyspace": self.schema.keyspace,
            "table": self.schema.table,
            "table_id": str(self.schema.table_id),
            "partition_key": self.partition_key(key),
            "digest": b"\x00" * 16,
            "is_counter": is_counter or self.schema.is_counter,
            "partition_deletion": None
            if partition_deletion is None
            else {"timestamp": partition_deletion[0], "local_deletion_time": partition_deletion[1]},
            "static_row": static_row,
            "rows": rows or [],
            "range_tombstones": range_tombstones or [],
        }
        body["digest"] = hashlib.md5(repr({k: v for k, v in body.items() if k != "source"}).encode()).digest()
        return decode_raw_event(encode_raw_event(body))

    # -- operations

    def events(
        self, ops: Sequence[Operation | tuple[Operation, int]], now: int = NOW
    ) -> list[dict[str, Any]]:
        """Events of several operations; an item may be ``(op, now)`` to write at another time."""
        out = []
        for item in ops:
            op, at = item if isinstance(item, tuple) else (item, now)
            out.append(self.event(op, now=at))
        return out

    def event(self, op: Operation, *, now: int = NOW, clock_micros: int | None = None) -> dict[str, Any]:
        """The raw event of ``op`` written when the node's clock read ``now`` (s).

        ``clock_micros``: the node's clock (µs) when the statement ran. Cassandra names new list elements
        with timeuuids of that clock, not of USING TIMESTAMP, so the same CQL run at other times orders
        elements differently; without it the write timestamp stands in for the clock.
        """
        handler = getattr(self, "_" + type(op).__name__)
        self._clock_micros = clock_micros
        try:
            return handler(op, now)
        finally:
            self._clock_micros = None

    def list_path(self, ts: int, index: int) -> bytes:
        """The timeuuid path of a statement's ``index``-th new list element (see ``event``)."""
        return timeuuid_path(ts if self._clock_micros is None else self._clock_micros, index)

    def _values_cells(
        self, values: dict[str, Any], ts: int, ttl: int, now: int, *, static: bool
    ) -> tuple[list[dict[str, Any]], list[tuple[str, int, int]]]:
        cells: list[dict[str, Any]] = []
        complex_deletions: list[tuple[str, int, int]] = []
        for name, value in values.items():
            column = self.column(name)
            if (name in self.schema.static_columns) != static:
                continue
            if not column.type.multi_cell:
                raw = None if value is None else serialize(column.type, value)
                cells.append(self.cell(name, raw, ts, ttl=ttl, now=now))
                continue
            complex_deletions.append((name, ts - 1, now))
            if value is not None:
                cells.extend(self._elements(column, value, ts, ttl, now))
        return cells, complex_deletions

    def _elements(
        self, column: ColumnSchema, value: Any, ts: int, ttl: int, now: int
    ) -> list[dict[str, Any]]:
        """The cells of a non-frozen collection or UDT value (list paths: this write's timeuuids; null
        UDT fields are not written: the overwrite's deletion clears them)."""
        name = column.name
        return [
            self.cell(name, raw, ts, ttl=ttl, now=now, path=self.list_path(ts, i) if path is None else path)
            for i, (path, raw) in enumerate(column.type.element_cells(value, native_bytes))
            if raw is not None
        ]

    def _Write(self, op: Write, now: int) -> dict[str, Any]:
        static_cells, static_deletions = self._values_cells(op.values, op.ts, op.ttl, now, static=True)
        cells, deletions = self._values_cells(op.values, op.ts, op.ttl, now, static=False)
        static_row = None
        if static_cells or static_deletions:
            static_row = self.row([], cells=static_cells, complex_deletions=static_deletions)
        rows = []
        regular = any(n in self.schema.regular_columns for n in op.values)
        # an INSERT without the clustering columns sets static columns only: no row, no row liveness
        full_key = len(op.clustering) == len(self.schema.clustering)
        if full_key and (op.insert or regular or not static_row):
            liveness = (op.ts, op.ttl, now + op.ttl if op.ttl else None) if op.insert else None
            rows.append(
                self.row(
                    self.clustering(op.clustering),
                    liveness=liveness,
                    cells=cells,
                    complex_deletions=deletions,
                )
            )
        return self.raw_event(op.key, static_row=static_row, rows=rows)

    def _DeleteRow(self, op: DeleteRow, now: int) -> dict[str, Any]:
        return self.raw_event(op.key, rows=[self.row(self.clustering(op.clustering), deletion=(op.ts, now))])

    def _DeletePartition(self, op: DeletePartition, now: int) -> dict[str, Any]:
        return self.raw_event(op.key, partition_deletion=(op.ts, now))

    def _DeleteColumns(self, op: DeleteColumns, now: int) -> dict[str, Any]:
        parts: dict[bool, tuple[list[dict[str, Any]], list[tuple[str, int, int]]]] = {
            True: ([], []),
            False: ([], []),
        }
        for name in op.columns:
            column = self.column(name)
            cells, deletions = parts[name in self.schema.static_columns]
            if column.type.multi_cell:
                deletions.append((name, op.ts, now))
            else:
                cells.append(self.cell(name, None, op.ts, now=now))
        static_row = (
            self.row([], cells=parts[True][0], complex_deletions=parts[True][1]) if any(parts[True]) else None
        )
        rows = []
        if any(parts[False]):
            rows.append(
                self.row(
                    self.clustering(op.clustering), cells=parts[False][0], complex_deletions=parts[False][1]
                )
            )
        return self.raw_event(op.key, static_row=static_row, rows=rows)

    def _DeleteRange(self, op: DeleteRange, now: int) -> dict[str, Any]:
        prefix = list(op.prefix)
        depth = len(prefix)
        descending = (
            depth < len(self.schema.clustering)
            and self.schema.clustering[depth].clustering_order == ClusteringOrder.DESC
        )
        low = None if op.low is None else ([*prefix, op.low], op.low_inclusive)
        high = None if op.high is None else ([*prefix, op.high], op.high_inclusive)
        first, last = (high, low) if descending else (low, high)
        start = (INCL_START, prefix) if first is None else (INCL_START if first[1] else EXCL_START, first[0])
        end = (INCL_END, prefix) if last is None else (INCL_END if last[1] else EXCL_END, last[0])
        return self._RangeMarkers(
            RangeMarkers(op.key, [(start[0], start[1], op.ts), (end[0], end[1], op.ts)]), now
        )

    def _RangeMarkers(self, op: RangeMarkers, now: int) -> dict[str, Any]:
        markers = []
        for marker in op.markers:
            kind, prefix, ts = marker[0], marker[1], marker[2]
            opened = marker[3] if len(marker) > 3 else None
            markers.append(
                {
                    "kind": kind,
                    "clustering": self.clustering(prefix),
                    "deletion": {"timestamp": ts, "local_deletion_time": now},
                    "start_deletion": None
                    if opened is None
                    else {"timestamp": opened, "local_deletion_time": now},
                }
            )
        return self.raw_event(op.key, range_tombstones=markers)

    def _complex_row(self, op: Any, cells: list[dict[str, Any]]) -> dict[str, Any]:
        if op.column in self.schema.static_columns:
            return self.raw_event(op.key, static_row=self.row([], cells=cells))
        return self.raw_event(op.key, rows=[self.row(self.clustering(op.clustering), cells=cells)])

    def _AddElements(self, op: AddElements, now: int) -> dict[str, Any]:
        return self._complex_row(op, self._elements(self.column(op.column), op.elements, op.ts, op.ttl, now))

    def _RemoveElements(self, op: RemoveElements, now: int) -> dict[str, Any]:
        column = self.column(op.column)
        t = column.type
        element = t.path_type
        if t.cell_layout not in (CellLayout.SET, CellLayout.MAP) or element is None:
            raise TypeError("elements are removed by value from sets and by key from maps")
        cells = [self.cell(op.column, None, op.ts, now=now, path=serialize(element, v)) for v in op.elements]
        return self._complex_row(op, cells)

    def _SetField(self, op: SetField, now: int) -> dict[str, Any]:
        t = self.column(op.column).type
        if t.cell_layout is not CellLayout.FIELDS:
            raise TypeError(f"{t.cql()} has no fields to set")
        udt = cast(UserType, t)
        index = udt.field_names.index(op.field_name)
        raw = None if op.value is None else serialize(udt.field_types[index], op.value)
        cells = [self.cell(op.column, raw, op.ts, ttl=op.ttl, now=now, path=index.to_bytes(2, "big"))]
        return self._complex_row(op, cells)

    def _CounterShard(self, op: CounterShard, now: int) -> dict[str, Any]:
        cells = [self.cell(op.column, counter_context([(op.counter_id, op.clock, op.count)]), op.ts, now=now)]
        return self._complex_row(op, cells)

"""The decoded form of a commit-log mutation: partition updates, rows, cells, tombstones.

Values stay raw bytes (``Cell.raw``, clustering and key components) and are decoded only when asked for,
so that walking the structure of a mutation costs no per-value Python decoding.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from cassandra_model.cql_types import CqlType
from cassandra_model.errors import ValueDecodeError
from cassandra_model.table_schema import ColumnSchema, TableSchema

#: Integer.MAX_VALUE: the local deletion time of something that is not deleted (4.x)
NO_DELETION_TIME = 2**31 - 1
#: 5.0 at MS 13 keeps the local deletion time as an unsigned int; this is its "no deletion" value
NO_DELETION_TIME_UNSIGNED = 2**32 - 1
#: Long.MIN_VALUE: markedForDeleteAt of the LIVE (no) deletion
LIVE_MARKED_FOR_DELETE_AT = -(2**63)


@dataclass(frozen=True, slots=True)
class DeletionTime:
    """A tombstone: everything written at or before ``marked_for_delete_at`` (µs) is deleted.

    ``local_deletion_time`` is the node's clock (s) when the deletion happened, used for gc_grace.
    """

    marked_for_delete_at: int
    local_deletion_time: int


@dataclass(frozen=True, slots=True)
class ComplexDeletion:
    """A deletion of a whole non-frozen collection/UDT column in one row (e.g. ``SET m = {...}``)."""

    column: ColumnSchema
    deletion: DeletionTime


@dataclass(slots=True)
class Cell:
    """One cell. ``raw`` is the serialized value (empty for tombstones and set elements).

    For a complex (multi-cell) column ``path`` holds the element key bytes (list: timeuuid, set: element,
    map: key, UDT: 2-byte field index); ``value`` then decodes the element, ``path_value`` the key.
    A live, non-expiring cell has ``ttl`` 0 and ``local_deletion_time`` NO_DELETION_TIME.
    """

    column: ColumnSchema
    flags: int
    timestamp: int
    ttl: int
    local_deletion_time: int
    path: bytes | None
    raw: bytes

    @property
    def is_tombstone(self) -> bool:
        return bool(self.flags & 0x01)

    @property
    def is_expiring(self) -> bool:
        return bool(self.flags & 0x02)

    @property
    def has_empty_value(self) -> bool:
        return not self.raw

    @property
    def value(self) -> Any:
        """The decoded value (decoded at each access; None for tombstones)."""
        if self.flags & 0x01:
            return None
        try:
            if self.path is None:
                return self.column.type.decode(self.raw)
            return self.column.type.decode_cell_value(self.path, self.raw)
        except ValueDecodeError as exc:
            raise ValueDecodeError(f"column {self.column.name}: {exc.reason}") from exc

    @property
    def path_value(self) -> Any:
        """The decoded element key of a complex cell, or None for a simple cell."""
        if self.path is None:
            return None
        try:
            return self.column.type.decode_path(self.path)
        except ValueDecodeError as exc:
            raise ValueDecodeError(f"column {self.column.name}: {exc.reason}") from exc


def _decode_prefix(raw: tuple[bytes | None, ...], types: tuple[CqlType, ...]) -> tuple[Any, ...]:
    return tuple(None if value is None else t.decode(value) for value, t in zip(raw, types, strict=False))


@dataclass(slots=True)
class Row:
    """A row (or the static row). ``timestamp`` is None when the row has no primary-key liveness.

    ``clustering_raw`` holds one entry per clustering column: bytes, or None for a null value.
    """

    clustering_raw: tuple[bytes | None, ...]
    clustering_types: tuple[CqlType, ...] = field(repr=False)
    timestamp: int | None
    ttl: int
    local_expiration_time: int | None
    deletion: DeletionTime | None
    cells: list[Cell]
    complex_deletions: list[ComplexDeletion] = field(default_factory=list)
    is_static: bool = False
    shadowable_deletion: bool = False

    @property
    def clustering(self) -> tuple[Any, ...]:
        """The decoded clustering values."""
        return _decode_prefix(self.clustering_raw, self.clustering_types)

    @property
    def has_liveness(self) -> bool:
        return self.timestamp is not None


class BoundKind(IntEnum):
    """ClusteringPrefix.Kind ordinals as serialized in range tombstone markers."""

    EXCL_END_BOUND = 0
    INCL_START_BOUND = 1
    EXCL_END_INCL_START_BOUNDARY = 2
    STATIC_CLUSTERING = 3
    CLUSTERING = 4
    INCL_END_EXCL_START_BOUNDARY = 5
    INCL_END_BOUND = 6
    EXCL_START_BOUND = 7

    @property
    def is_boundary(self) -> bool:
        return self in (BoundKind.EXCL_END_INCL_START_BOUNDARY, BoundKind.INCL_END_EXCL_START_BOUNDARY)


@dataclass(slots=True)
class RangeTombstoneBound:
    """Opens or closes a range deletion at ``clustering_raw`` (a prefix; empty = unbounded)."""

    kind: BoundKind
    clustering_raw: tuple[bytes | None, ...]
    clustering_types: tuple[CqlType, ...] = field(repr=False)
    deletion: DeletionTime

    @property
    def is_start(self) -> bool:
        return self.kind in (BoundKind.INCL_START_BOUND, BoundKind.EXCL_START_BOUND)

    @property
    def is_end(self) -> bool:
        return not self.is_start

    @property
    def inclusive(self) -> bool:
        return self.kind in (BoundKind.INCL_START_BOUND, BoundKind.INCL_END_BOUND)

    @property
    def clustering(self) -> tuple[Any, ...]:
        return _decode_prefix(self.clustering_raw, self.clustering_types)


@dataclass(slots=True)
class RangeTombstoneBoundary:
    """Closes one range deletion and opens the next at the same clustering prefix."""

    kind: BoundKind
    clustering_raw: tuple[bytes | None, ...]
    clustering_types: tuple[CqlType, ...] = field(repr=False)
    end_deletion: DeletionTime
    start_deletion: DeletionTime

    @property
    def end_inclusive(self) -> bool:
        return self.kind == BoundKind.INCL_END_EXCL_START_BOUNDARY

    @property
    def start_inclusive(self) -> bool:
        return self.kind == BoundKind.EXCL_END_INCL_START_BOUNDARY

    @property
    def clustering(self) -> tuple[Any, ...]:
        return _decode_prefix(self.clustering_raw, self.clustering_types)


RangeTombstoneMarker = RangeTombstoneBound | RangeTombstoneBoundary


def split_composite_key(key: bytes, count: int) -> tuple[bytes, ...]:
    """Components of a multi-column partition key: per column u16 length, bytes, end-of-component byte."""
    if count == 1:
        return (key,)
    parts = []
    pos = 0
    while pos < len(key):
        if pos + 2 > len(key):
            raise ValueDecodeError("composite partition key is cut inside a length")
        size = int.from_bytes(key[pos : pos + 2], "big")
        end = pos + 2 + size
        if end + 1 > len(key):
            raise ValueDecodeError("composite partition key is cut inside a component")
        parts.append(key[pos + 2 : end])
        pos = end + 1
    if len(parts) != count:
        raise ValueDecodeError(f"composite partition key has {len(parts)} components, the table {count}")
    return tuple(parts)


@dataclass(slots=True, eq=False)
class PartitionUpdate:
    """Everything one mutation changed in one partition of one table.

    ``segment``, ``offset`` (entry start) and ``position`` (entry end, Cassandra's CommitLogPosition) are
    where the entry was read from; the framing layer sets ``position``.
    """

    schema: TableSchema
    partition_key: bytes
    partition_deletion: DeletionTime | None
    static_row: Row | None
    rows: list[Row]
    range_tombstones: list[RangeTombstoneBound | RangeTombstoneBoundary]
    is_counter: bool = False
    messaging_version: int = 12
    segment: str | None = None
    offset: int | None = None
    position: int | None = None

    @property
    def table_id(self) -> uuid.UUID:
        return self.schema.table_id

    @property
    def keyspace(self) -> str:
        return self.schema.keyspace

    @property
    def table(self) -> str:
        return self.schema.table

    def partition_key_components(self) -> tuple[bytes, ...]:
        """The raw value of each partition-key column, in key order."""
        return split_composite_key(self.partition_key, len(self.schema.partition_key))

    def partition_key_values(self) -> tuple[Any, ...]:
        """The decoded value of each partition-key column, in key order."""
        parts = self.partition_key_components()
        return tuple(c.type.decode(p) for c, p in zip(self.schema.partition_key, parts, strict=True))

    def cell_count(self) -> int:
        rows = self.rows if self.static_row is None else [self.static_row, *self.rows]
        return sum(len(r.cells) for r in rows)

    def newest_timestamp(self) -> int | None:
        """The newest write timestamp (µs) anywhere in the update: cells, row liveness and deletions,
        collection deletions, range tombstones and the partition deletion; None when it holds none."""
        stamps: list[int] = []
        if self.partition_deletion is not None:
            stamps.append(self.partition_deletion.marked_for_delete_at)
        for row in self.rows if self.static_row is None else [self.static_row, *self.rows]:
            if row.timestamp is not None:
                stamps.append(row.timestamp)
            if row.deletion is not None:
                stamps.append(row.deletion.marked_for_delete_at)
            stamps.extend(cell.timestamp for cell in row.cells)
            stamps.extend(c.deletion.marked_for_delete_at for c in row.complex_deletions)
        for bound in self.range_tombstones:
            if isinstance(bound, RangeTombstoneBoundary):
                stamps += [bound.end_deletion.marked_for_delete_at, bound.start_deletion.marked_for_delete_at]
            else:
                stamps.append(bound.deletion.marked_for_delete_at)
        return max(stamps, default=None)

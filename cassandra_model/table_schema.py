"""What the mutation decoder must know about a table, and a catalog of tables keyed by table id.

The commit log carries no type information (format notes §8): a mutation names its table by id and its
columns by name, so every id must map to the table's key layout, column types and dropped columns.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from cassandra_model.cql_types import CqlType, UserType, parse_cql_type
from cassandra_model.errors import SchemaError, UnknownTableError


class ColumnKind(StrEnum):
    """system_schema.columns.kind."""

    PARTITION_KEY = "partition_key"
    CLUSTERING = "clustering"
    STATIC = "static"
    REGULAR = "regular"


class ClusteringOrder(StrEnum):
    """system_schema.columns.clustering_order (``none`` for non-clustering columns)."""

    ASC = "asc"
    DESC = "desc"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class ColumnSchema:
    """One column. ``position`` is the key position for key columns and -1 otherwise.

    ``dropped_time`` (µs) is set only on the stand-in the decoder builds for a dropped column.
    """

    name: str
    kind: ColumnKind
    position: int
    type: CqlType
    clustering_order: ClusteringOrder = ClusteringOrder.NONE
    dropped_time: int | None = None

    @property
    def is_complex(self) -> bool:
        """Multi-cell: written as a cell count and one cell per element."""
        return self.type.multi_cell

    @property
    def is_dropped(self) -> bool:
        return self.dropped_time is not None


@dataclass(frozen=True, slots=True)
class DroppedColumn:
    """A column removed by ALTER TABLE DROP; older cells still in the log decode with ``type``."""

    name: str
    type: CqlType
    dropped_time: int  # microseconds since the epoch, as system_schema.dropped_columns implies
    kind: ColumnKind = ColumnKind.REGULAR

    def as_column(self) -> ColumnSchema:
        return ColumnSchema(self.name, self.kind, -1, self.type, dropped_time=self.dropped_time)


@dataclass(slots=True, eq=False)
class TableSchema:
    """A table as the decoder needs it; build one per schema version of a table id.

    Treat it as immutable once registered: the decoder caches what it derives from it. To change a
    table, build a new TableSchema and ``SchemaCatalog.replace`` it.
    """

    keyspace: str
    table: str
    table_id: uuid.UUID
    partition_key: tuple[ColumnSchema, ...]
    clustering: tuple[ColumnSchema, ...] = ()
    static_columns: dict[str, ColumnSchema] = field(default_factory=dict)
    regular_columns: dict[str, ColumnSchema] = field(default_factory=dict)
    dropped_columns: dict[str, DroppedColumn] = field(default_factory=dict)
    cdc: bool = False
    gc_grace_seconds: int = 864000
    is_counter: bool = False
    #: the mutation decoder's private cache (resolved column headers...); per schema object, never stale
    decoder_cache: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"table {self.keyspace}.{self.table} ({self.table_id})"
        if not self.partition_key:
            raise SchemaError(f"{where} has no partition key column")
        for group, kind in (
            (self.partition_key, ColumnKind.PARTITION_KEY),
            (self.clustering, ColumnKind.CLUSTERING),
        ):
            if [c.position for c in group] != list(range(len(group))):
                raise SchemaError(f"{where}: {kind} columns must have positions 0..{len(group) - 1} in order")
            if any(c.kind != kind for c in group):
                raise SchemaError(f"{where}: a column listed as {kind} has another kind")
        names = [c.name for c in self.all_columns()]
        if len(set(names)) != len(names):
            raise SchemaError(f"{where}: duplicate column names")
        for col in self.all_columns():
            if col.type.multi_cell and col.kind in (ColumnKind.PARTITION_KEY, ColumnKind.CLUSTERING):
                raise SchemaError(f"{where}: key column {col.name} cannot be multi-cell ({col.type.cql()})")
        counters = [
            c for c in (*self.static_columns.values(), *self.regular_columns.values()) if c.type.is_counter
        ]
        if counters:
            self.is_counter = True

    @property
    def name(self) -> str:
        return f"{self.keyspace}.{self.table}"

    def all_columns(self) -> list[ColumnSchema]:
        return [
            *self.partition_key,
            *self.clustering,
            *self.static_columns.values(),
            *self.regular_columns.values(),
        ]

    def column(self, name: str) -> ColumnSchema | None:
        """The current column of that name, whatever its kind."""
        for col in (*self.partition_key, *self.clustering):
            if col.name == name:
                return col
        return self.static_columns.get(name) or self.regular_columns.get(name)

    def header_column(self, name: str) -> ColumnSchema | None:
        """Resolve a name from a mutation's column header: a current column, else a dropped stand-in."""
        col = self.regular_columns.get(name) or self.static_columns.get(name)
        if col is not None:
            return col
        dropped = self.dropped_columns.get(name)
        return dropped.as_column() if dropped is not None else None

    def dropped_time(self, name: str) -> int | None:
        """When a column of that name was last dropped (µs); cells at or before it are discarded."""
        dropped = self.dropped_columns.get(name)
        return dropped.dropped_time if dropped is not None else None

    def before_drops(self, names: Iterable[str]) -> TableSchema:
        """The table as it was before the named dropped columns were dropped: each one back as a column
        of its dropped type and kind (a column added again since keeps its current type), and their
        cells written before the drop visible again. What a reader saw until the ALTER TABLE ... DROP,
        so the rows that lived only by such a column can be shown as they were when they went."""
        names = set(names)
        unknown = sorted(names - set(self.dropped_columns))
        if unknown:
            raise SchemaError(f"table {self.name} has no dropped column {', '.join(unknown)}")
        static, regular = dict(self.static_columns), dict(self.regular_columns)
        for name in sorted(names):
            dropped = self.dropped_columns[name]
            if self.column(name) is not None:
                continue
            group = static if dropped.kind == ColumnKind.STATIC else regular
            group[name] = ColumnSchema(name, dropped.kind, -1, dropped.type)
        return TableSchema(
            keyspace=self.keyspace,
            table=self.table,
            table_id=self.table_id,
            partition_key=self.partition_key,
            clustering=self.clustering,
            static_columns=dict(sorted(static.items())) if _sorted(self.static_columns) else static,
            regular_columns=dict(sorted(regular.items())) if _sorted(self.regular_columns) else regular,
            dropped_columns={n: d for n, d in self.dropped_columns.items() if n not in names},
            cdc=self.cdc,
            gc_grace_seconds=self.gc_grace_seconds,
        )


def _sorted(columns: dict[str, ColumnSchema]) -> bool:
    """Whether columns are in name order, as Cassandra keeps regular and static columns (so a column
    given back goes where it was; otherwise it goes last)."""
    names = list(columns)
    return names == sorted(names)


@dataclass(slots=True)
class _UdtDefinition:
    field_names: tuple[str, ...]
    field_types: tuple[str | CqlType, ...]


class UdtRegistry:
    """User-defined types per keyspace; field types may be strings, parsed on first use (any order)."""

    __slots__ = ("_definitions", "_resolved", "_resolving")

    def __init__(self) -> None:
        self._definitions: dict[tuple[str, str], _UdtDefinition] = {}
        self._resolved: dict[tuple[str, str], UserType] = {}
        self._resolving: set[tuple[str, str]] = set()

    def define(
        self, keyspace: str, name: str, field_names: Sequence[str], field_types: Sequence[str | CqlType]
    ) -> None:
        """Add or replace a type (replacing clears resolved types, which may nest it)."""
        if len(field_names) != len(field_types):
            raise SchemaError(
                f"type {keyspace}.{name}: {len(field_names)} field names, {len(field_types)} types"
            )
        self._definitions[(keyspace, name)] = _UdtDefinition(tuple(field_names), tuple(field_types))
        self._resolved.clear()

    def names(self, keyspace: str) -> list[str]:
        return sorted(name for ks, name in self._definitions if ks == keyspace)

    def resolve_udt(self, keyspace: str | None, name: str) -> UserType:
        """The (non-frozen) UserType; SchemaError if unknown or defined in terms of itself."""
        key = (keyspace or "", name)
        found = self._resolved.get(key)
        if found is not None:
            return found
        definition = self._definitions.get(key)
        if definition is None:
            raise SchemaError(f"unknown user type {name!r} in keyspace {keyspace!r}; add its CREATE TYPE")
        if key in self._resolving:
            raise SchemaError(f"user type {keyspace}.{name} refers to itself")
        self._resolving.add(key)
        try:
            types = tuple(
                t if isinstance(t, CqlType) else parse_cql_type(t, keyspace=keyspace, udts=self)
                for t in definition.field_types
            )
        finally:
            self._resolving.discard(key)
        resolved = UserType(key[0], name, definition.field_names, types, frozen=False)
        self._resolved[key] = resolved
        return resolved


class SchemaCatalog:
    """Tables by id, with the history of every definition an id had, and the user types.

    An id keeps resolving after its table is dropped or recreated under a new id, because older segments
    still hold mutations for it.
    """

    __slots__ = ("_by_name", "_by_raw_id", "_history", "udts")

    def __init__(self, tables: Iterable[TableSchema] = ()) -> None:
        self._by_raw_id: dict[bytes, TableSchema] = {}
        self._history: dict[uuid.UUID, list[TableSchema]] = {}
        self._by_name: dict[tuple[str, str], uuid.UUID] = {}
        self.udts = UdtRegistry()
        for table in tables:
            self.add(table)

    def __len__(self) -> int:
        return len(self._by_raw_id)

    def __contains__(self, table_id: object) -> bool:
        return isinstance(table_id, uuid.UUID) and table_id.bytes in self._by_raw_id

    def add(self, table: TableSchema) -> None:
        """Register a new table id; SchemaError if the id is known (use ``replace`` after an ALTER)."""
        if table.table_id.bytes in self._by_raw_id:
            known = self._by_raw_id[table.table_id.bytes]
            raise SchemaError(f"table id {table.table_id} is already registered as {known.name}")
        self._store(table)

    def replace(self, table: TableSchema) -> None:
        """Register a new definition for a known id (or a new id); the old one stays in the history."""
        self._store(table)

    def _store(self, table: TableSchema) -> None:
        self._by_raw_id[table.table_id.bytes] = table
        self._history.setdefault(table.table_id, []).append(table)
        self._by_name[(table.keyspace, table.table)] = table.table_id

    def remove(self, table_id: uuid.UUID) -> None:
        """Forget an id entirely (its history too)."""
        table = self._by_raw_id.pop(table_id.bytes, None)
        self._history.pop(table_id, None)
        if table is not None and self._by_name.get((table.keyspace, table.table)) == table_id:
            del self._by_name[(table.keyspace, table.table)]

    def get(self, table_id: uuid.UUID) -> TableSchema | None:
        return self._by_raw_id.get(table_id.bytes)

    def get_raw(self, table_id: bytes) -> TableSchema | None:
        """Lookup by the 16 serialized id bytes (the decoder's hot path: no UUID object needed)."""
        return self._by_raw_id.get(table_id)

    def lookup(
        self, table_id: uuid.UUID, *, segment: str | None = None, offset: int | None = None
    ) -> TableSchema:
        """The current definition of an id; UnknownTableError (carrying the id) if it was never registered."""
        table = self._by_raw_id.get(table_id.bytes)
        if table is None:
            raise UnknownTableError(str(table_id), segment=segment, offset=offset)
        return table

    def by_name(self, keyspace: str, table: str) -> TableSchema | None:
        table_id = self._by_name.get((keyspace, table))
        return self._by_raw_id.get(table_id.bytes) if table_id is not None else None

    def history(self, table_id: uuid.UUID) -> tuple[TableSchema, ...]:
        """Every definition registered for the id, oldest first."""
        return tuple(self._history.get(table_id, ()))

    def tables(self) -> list[TableSchema]:
        return list(self._by_raw_id.values())

    def merge(self, other: SchemaCatalog) -> None:
        """Add (or replace with) every table and user type of another catalog."""
        for table in other.tables():
            self.replace(table)
        for (keyspace, name), definition in other.udts._definitions.items():
            self.udts.define(keyspace, name, definition.field_names, definition.field_types)

"""What the merge and the images need to know about a table, derived once per TableSchema object."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cassandra_model.clustering_order import ClusteringKeyOrder, component_encoder
from cassandra_model.cql_types import CellLayout, CqlType
from cassandra_model.table_schema import ColumnSchema, TableSchema

PathKey = Callable[[bytes], bytes]


@dataclass(frozen=True, slots=True)
class ColumnLayout:
    """One static or regular column.

    ``path_key`` maps a complex cell's path to the key that identifies the element (None: the path bytes
    themselves, for types where equal elements have equal bytes). ``path_order`` maps a path to a key
    that sorts elements as Cassandra does (list: timeuuid order; set/map: element/key type order; None:
    path bytes, i.e. UDT field index). ``dropped_time`` is set for a column dropped and added again:
    its cells at or before that time stay invisible.
    """

    name: str
    type: CqlType
    is_static: bool
    is_complex: bool
    is_counter: bool
    path_key: PathKey | None
    path_order: PathKey | None
    dropped_time: int | None


def _column(col: ColumnSchema, is_static: bool, dropped_time: int | None) -> ColumnLayout:
    t = col.type
    path_type = t.path_type if t.multi_cell else None  # None for UDT/tuple: a field index, by its bytes
    order = component_encoder(path_type) if path_type is not None else None
    key = order if path_type is not None and not path_type.byte_identical else None
    return ColumnLayout(
        col.name,
        t,
        is_static,
        t.multi_cell,
        t.is_counter,
        key,
        order,
        dropped_time,
    )


class TableLayout:
    """Clustering order and column facts of one schema version (build with ``layout_for``)."""

    __slots__ = ("clustering", "columns", "is_counter", "lists", "regular", "schema", "static")

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self.clustering = ClusteringKeyOrder.for_table(schema)
        dropped = {name: d.dropped_time for name, d in schema.dropped_columns.items()}
        self.static = {n: _column(c, True, dropped.get(n)) for n, c in schema.static_columns.items()}
        self.regular = {n: _column(c, False, dropped.get(n)) for n, c in schema.regular_columns.items()}
        self.columns = {**self.static, **self.regular}
        self.is_counter = schema.is_counter
        #: list columns: their cell paths are timeuuids nobody sees, so images compare their values only
        self.lists = frozenset(n for n, c in self.columns.items() if c.type.cell_layout is CellLayout.LIST)


_LAYOUTS: dict[int, tuple[TableSchema, TableLayout]] = {}


def clustering_key(schema: TableSchema, clustering: Sequence[bytes | None]) -> bytes:
    """The state's (byte-comparable) row key of a serialized clustering."""
    return layout_for(schema).clustering.key(clustering)


def layout_for(schema: TableSchema) -> TableLayout:
    """The layout of a schema object (cached; a new TableSchema object after ALTER gets a new one)."""
    found = _LAYOUTS.get(id(schema))
    if found is not None and found[0] is schema:
        return found[1]
    if len(_LAYOUTS) > 4096:
        _LAYOUTS.clear()
    layout = TableLayout(schema)
    _LAYOUTS[id(schema)] = (schema, layout)
    return layout

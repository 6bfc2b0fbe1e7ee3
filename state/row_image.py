"""What a SELECT would return for a row at a given time, built from the merged state.

A row exists when its primary-key liveness is live or any of its regular cells is live; static columns
(partition-wide) are part of every row's image. A partition with live static cells and no existing row
reads as one row whose clustering columns are null (``clustering is None`` here). Columns not in the
current schema, and cells of a re-added column written at or before it was dropped, are invisible.

An image keeps the live Cell objects themselves (value bytes, write time, TTL, expiry), so comparing two
images and serving per-cell write time and TTL cost no decoding; ``decode_row`` decodes on demand.
Counter columns are the exception: their image cell holds the counter's value as an 8-byte bigint, not
the merged CounterContext, so that two contexts with the same sum are the same visible value.

The static-only row needs a live static CELL; a static row liveness (which CQL never writes) does not
make one. Empty values of types where empty is not a value (an int written as ``0x``) decode to None.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cassandra_model.partition_update import split_composite_key
from cassandra_model.table_schema import ColumnSchema, TableSchema
from state.cell_merge import TOMBSTONE, Cell, Liveness
from state.counter_merge import counter_value
from state.partition_state import PartitionState
from state.row_state import RowState
from state.table_layout import ColumnLayout, TableLayout, layout_for

_I64 = struct.Struct(">q")

#: a simple column's live cell, or a complex column's live elements in Cassandra's element order
ColumnImage = Cell | tuple[Cell, ...]


@dataclass(slots=True)
class RowImage:
    """The visible content of one row: live static and regular columns (absent = null)."""

    partition_key: bytes
    clustering: tuple[bytes | None, ...] | None
    static: dict[str, ColumnImage]
    regular: dict[str, ColumnImage]
    liveness: Liveness | None = None

    def same_values(self, other: RowImage, lists: frozenset[str] = frozenset()) -> bool:
        """Whether both images show the same values (write times and TTLs aside; ``lists`` names the
        list columns, whose element paths are not part of what a reader sees)."""
        return (
            self.clustering == other.clustering
            and same_columns(self.regular, other.regular, lists)
            and same_columns(self.static, other.static, lists)
        )

    def write_time(self) -> int | None:
        """The largest write timestamp (µs) of anything visible in the row."""
        times = [c.timestamp for c in _cells(self.static)] + [c.timestamp for c in _cells(self.regular)]
        if self.liveness is not None:
            times.append(self.liveness.timestamp)
        return max(times, default=None)


def _cells(columns: dict[str, ColumnImage]) -> list[Cell]:
    out: list[Cell] = []
    for image in columns.values():
        if isinstance(image, tuple):
            out.extend(image)
        else:
            out.append(image)
    return out


def same_columns(
    a: dict[str, ColumnImage], b: dict[str, ColumnImage], lists: frozenset[str] = frozenset()
) -> bool:
    """Whether two column images show the same values. Elements of sets, maps and UDTs are identified
    by their paths; list elements only by position (``SET l = [1]`` over ``[1]`` writes new timeuuid
    paths but shows the same list, so it is no change)."""
    if a is b:
        return True
    if a.keys() != b.keys():
        return False
    for name, x in a.items():
        y = b[name]
        if x is y:
            continue
        if isinstance(x, tuple):
            if not isinstance(y, tuple) or len(x) != len(y):
                return False
            if name in lists:
                if any(p.value != q.value for p, q in zip(x, y, strict=True)):
                    return False
            elif any(p.value != q.value or p.path != q.path for p, q in zip(x, y, strict=True)):
                return False
        elif isinstance(y, tuple) or x.value != y.value:
            return False
    return True


# ---------------------------------------------------------------------------------------------------------
# building images


def _visible(cell: Cell, column: ColumnLayout, now_s: int) -> bool:
    return cell.is_live(now_s) and (column.dropped_time is None or cell.timestamp > column.dropped_time)


def _counter_cell(cell: Cell) -> Cell:
    return Cell(cell.timestamp, 0, cell.local_deletion_time, 0, _I64.pack(counter_value(cell.value)))


def _element_order(column: ColumnLayout) -> Callable[[Cell], bytes]:
    order = column.path_order
    if order is None:
        return lambda c: c.path or b""
    return lambda c: order(c.path or b"")


def live_columns(row: RowState, columns: dict[str, ColumnLayout], now_s: int) -> dict[str, ColumnImage]:
    """The live cells of a row, for the columns given (static or regular ones)."""
    out: dict[str, ColumnImage] = {}
    get = columns.get
    for name, cell in row.cells.items():
        column = get(name)
        if column is None or column.is_complex:
            continue
        flags = cell.flags  # inlined Cell.is_live: this loop is the hot path of every image
        if flags and (flags & TOMBSTONE or now_s >= cell.local_deletion_time):
            continue
        dropped = column.dropped_time
        if dropped is not None and cell.timestamp <= dropped:
            continue
        out[name] = _counter_cell(cell) if column.is_counter else cell
    for name, elements in row.complex_cells.items():
        column = columns.get(name)
        if column is None or not column.is_complex:
            continue
        live = [c for c in elements.values() if _visible(c, column, now_s)]
        if not live:
            continue
        if len(live) > 1:
            live.sort(key=_element_order(column))
        out[name] = tuple(live)
    return out


def _live_liveness(row: RowState, now_s: int) -> Liveness | None:
    liveness = row.liveness
    return liveness if liveness is not None and liveness.is_live(now_s) else None


def row_exists(row: RowState, layout: TableLayout, now_s: int) -> bool:
    """Cassandra's ``hasLiveData``: a live primary-key liveness or any live regular cell."""
    if _live_liveness(row, now_s) is not None:
        return True
    regular = layout.regular
    for name, cell in row.cells.items():
        column = regular.get(name)
        if column is not None and not column.is_complex and _visible(cell, column, now_s):
            return True
    for name, elements in row.complex_cells.items():
        column = regular.get(name)
        if (
            column is not None
            and column.is_complex
            and any(_visible(c, column, now_s) for c in elements.values())
        ):
            return True
    return False


def static_columns(state: PartitionState, layout: TableLayout, now_s: int) -> dict[str, ColumnImage]:
    """The live static columns of the partition."""
    if state.static_row is None or not layout.static:
        return {}
    return live_columns(state.static_row, layout.static, now_s)


def regular_image(
    state: PartitionState,
    key: bytes,
    layout: TableLayout,
    now_s: int,
    static: dict[str, ColumnImage],
) -> RowImage | None:
    """The image of the row at ``key`` with the given static part, or None if the row does not exist."""
    row = state.rows.get(key)
    if row is None:
        return None
    return image_of_row(state.partition_key, row, layout, now_s, static)


def image_of_row(
    partition_key: bytes, row: RowState, layout: TableLayout, now_s: int, static: dict[str, ColumnImage]
) -> RowImage | None:
    """``regular_image`` of a row held outside a partition state (None: the row does not exist)."""
    regular = live_columns(row, layout.regular, now_s)
    liveness = _live_liveness(row, now_s)
    if liveness is None and not regular:
        return None
    return RowImage(partition_key, row.clustering, static, regular, liveness)


def static_only_image(
    state: PartitionState, layout: TableLayout, now_s: int, static: dict[str, ColumnImage] | None = None
) -> RowImage | None:
    """The null-clustering row a partition shows when it has live static cells and no existing row."""
    if static is None:
        static = static_columns(state, layout, now_s)
    if not static or not layout.schema.clustering:
        return None
    any_row = any(row_exists(row, layout, now_s) for row in state.rows.values())
    return static_only_row(state.partition_key, layout, static, any_row=any_row)


def static_only_row(
    partition_key: bytes, layout: TableLayout, static: dict[str, ColumnImage], *, any_row: bool
) -> RowImage | None:
    """The static-only row, given whether any row of the partition exists."""
    if not static or any_row or not layout.schema.clustering:
        return None
    return RowImage(partition_key, None, static, {}, None)


def row_image(state: PartitionState, key: bytes | None, schema: TableSchema, now_s: int) -> RowImage | None:
    """The visible row at a clustering key (``None``: the static-only row), or None if there is none."""
    layout = layout_for(schema)
    static = static_columns(state, layout, now_s)
    if key is None:
        return static_only_image(state, layout, now_s, static)
    return regular_image(state, key, layout, now_s, static)


def partition_images(state: PartitionState, schema: TableSchema, now_s: int) -> list[RowImage]:
    """Every visible row of the partition in clustering order (what ``SELECT * WHERE pk = ?`` returns)."""
    layout = layout_for(schema)
    static = static_columns(state, layout, now_s)
    out = []
    for key in state.sorted_keys():
        image = regular_image(state, key, layout, now_s, static)
        if image is not None:
            out.append(image)
    if not out:
        only = static_only_image(state, layout, now_s, static)
        if only is not None:
            out.append(only)
    return out


# ---------------------------------------------------------------------------------------------------------
# decoding


def decode_column(column: ColumnSchema, image: ColumnImage | None, is_counter: bool) -> Any:
    """The Python value of one column of an image (None: null), as ``decode_row`` gives it."""
    if image is None:
        return None
    if isinstance(image, tuple):
        return column.type.assemble([(c.path or b"", c.value) for c in image])
    if is_counter:
        return _I64.unpack(image.value)[0]
    return column.type.decode(image.value)


def primary_key(image: RowImage, schema: TableSchema) -> dict[str, Any]:
    """The decoded partition key and clustering columns (clustering None for the static-only row)."""
    out: dict[str, Any] = {}
    parts = split_composite_key(image.partition_key, len(schema.partition_key))
    for column, raw in zip(schema.partition_key, parts, strict=True):
        out[column.name] = column.type.decode(raw)
    for i, column in enumerate(schema.clustering):
        raw_value = None if image.clustering is None else image.clustering[i]
        out[column.name] = None if raw_value is None else column.type.decode(raw_value)
    return out


def decode_row(image: RowImage, schema: TableSchema) -> dict[str, Any]:
    """Every column of the table with its decoded value (None = null), as SELECT * shows the row."""
    layout = layout_for(schema)
    out = primary_key(image, schema)
    for name, column in schema.static_columns.items():
        out[name] = decode_column(column, image.static.get(name), layout.static[name].is_counter)
    for name, column in schema.regular_columns.items():
        out[name] = decode_column(column, image.regular.get(name), layout.regular[name].is_counter)
    return out


def _cell_info(cell: Cell, now_s: int | None) -> dict[str, Any]:
    expires = cell.expires_at()
    info: dict[str, Any] = {"writetime": cell.timestamp, "ttl": cell.ttl or None, "expires_at": expires}
    if now_s is not None:
        info["remaining_ttl"] = None if expires is None else max(0, expires - now_s)
    return info


def cell_metadata(image: RowImage, now_s: int | None = None) -> dict[str, Any]:
    """Per live column: write time (µs), TTL (s), expiry (s) and, given ``now_s``, the remaining TTL
    (what WRITETIME()/TTL() return); complex columns give one entry per element, in element order."""
    out: dict[str, Any] = {}
    for columns in (image.static, image.regular):
        for name, column_image in columns.items():
            if isinstance(column_image, tuple):
                out[name] = [_cell_info(c, now_s) for c in column_image]
            else:
                out[name] = _cell_info(column_image, now_s)
    return out

"""Decode one commit-log entry (a serialized Mutation, MS 10-14) into PartitionUpdates (format notes §7).

Structure only: values stay raw bytes and are decoded lazily by the model classes, so that this module
does no per-value Python work. The hot loops read vints inline (one byte covers most deltas and lengths)
and cache each distinct column header per table schema.
"""

from __future__ import annotations

import struct
import uuid

from agents.commitlog.errors import DECODE_ERRORS, MutationDecodeError, UnknownColumnError
from cassandra_model.cql_types import CqlType, read_unsigned_vint
from cassandra_model.errors import UnknownTableError
from cassandra_model.partition_update import (
    NO_DELETION_TIME,
    BoundKind,
    Cell,
    ComplexDeletion,
    DeletionTime,
    PartitionUpdate,
    RangeTombstoneBound,
    RangeTombstoneBoundary,
    Row,
)
from cassandra_model.table_schema import ColumnSchema, SchemaCatalog, TableSchema

TIMESTAMP_EPOCH = 1_442_880_000_000_000  # µs, 2015-09-22T00:00:00Z
DELETION_TIME_EPOCH = 1_442_880_000  # s, the same instant
SUPPORTED_MESSAGING_VERSIONS = frozenset({10, 11, 12, 13, 14})

# PartitionUpdate flags
_PU_IS_EMPTY = 0x01
_PU_HAS_PARTITION_DELETION = 0x04
_PU_HAS_STATIC_ROW = 0x08
_PU_HAS_ROW_ESTIMATE = 0x10
# Unfiltered flags
_END_OF_PARTITION = 0x01
_IS_MARKER = 0x02
_HAS_TIMESTAMP = 0x04
_HAS_TTL = 0x08
_HAS_DELETION = 0x10
_HAS_ALL_COLUMNS = 0x20
_HAS_COMPLEX_DELETION = 0x40
_EXTENSION_FLAG = 0x80
_IS_STATIC = 0x01
_HAS_SHADOWABLE_DELETION = 0x02
# Cell flags
_IS_DELETED = 0x01
_IS_EXPIRING = 0x02
_HAS_EMPTY_VALUE = 0x04
_USE_ROW_TIMESTAMP = 0x08
_USE_ROW_TTL = 0x10
_DELETED_OR_EXPIRING = _IS_DELETED | _IS_EXPIRING

_MAX64 = 2**63 - 1
_MIN64 = -(2**63)
_TWO64 = 2**64
_LIVE = _MIN64
_HEADER_CACHE_LIMIT = 512
_U16 = struct.Struct(">H")
_EMPTY = b""


class _Malformed(Exception):
    """Internal: the bytes contradict the format; turned into MutationDecodeError with context."""


# A header column as the hot loop wants it (a tuple unpacks faster than attribute loads):
# (column, is complex, fixed value length or -1, drop time in µs or None)
_Column = tuple[ColumnSchema, bool, int, int | None]


def _column(column: ColumnSchema, dropped: int | None) -> _Column:
    complex_ = column.type.multi_cell
    fixed = column.type.fixed_length
    return column, complex_, -1 if fixed is None or complex_ else fixed, dropped


class _Header:
    """The resolved columns of one serialized column header, and the subsets seen for it."""

    __slots__ = ("columns", "subsets")

    def __init__(self, columns: tuple[_Column, ...]) -> None:
        self.columns = columns
        self.subsets: dict[int, tuple[_Column, ...]] = {}


_NO_COLUMNS = _Header(())


class _TableInfo:
    """Per-schema decoding facts, cached in TableSchema.decoder_cache under the key None.

    ``last`` keeps the raw bytes of the last static/regular header seen: a header encoding is
    self-delimiting, so when the next mutation's bytes start with it, it is that header.
    """

    __slots__ = ("fixed", "last", "types")

    def __init__(self, schema: TableSchema) -> None:
        self.types: tuple[CqlType, ...] = tuple(c.type for c in schema.clustering)
        self.fixed = tuple(-1 if t.fixed_length is None else t.fixed_length for t in self.types)
        self.last: list[tuple[bytes, _Header] | None] = [None, None]  # [regular, static]


_uvint = read_unsigned_vint


def _s32(v: int) -> int:
    return ((v + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def _s64(v: int) -> int:
    if v > _MAX64 or v < _MIN64:
        return ((v - _MIN64) % _TWO64) + _MIN64
    return v


def _ldt(min_ldt: int, v: int) -> int:
    """Local deletion time rule covering MS 12 (int32) and MS 13 (uint32): §7.3."""
    ldt = min_ldt + _s32(v)
    if ldt < 0 or ldt > 0xFFFFFFFF:
        ldt &= 0xFFFFFFFF
    return ldt


def decode_mutation(
    data: bytes | bytearray | memoryview,
    catalog: SchemaCatalog,
    *,
    messaging_version: int,
    segment: str | None = None,
    offset: int | None = None,
) -> list[PartitionUpdate]:
    """Decode the body of one commit-log entry.

    Raises UnknownTableError (with ``table_id``) when any partition update targets a table the catalog
    does not know (Cassandra skips the whole mutation too), UnknownColumnError when a column name is
    neither current nor dropped, and MutationDecodeError for anything malformed; all name the segment
    and offset given.
    """
    if messaging_version not in SUPPORTED_MESSAGING_VERSIONS:
        raise MutationDecodeError(
            f"unsupported messaging version {messaging_version} (supported: 10-14)",
            segment=segment,
            offset=offset,
        )
    buf = data if type(data) is bytes else bytes(data)
    context: list[object] = [0, None, 0]  # partition update index, table name, its first byte
    try:
        count, pos = _uvint(buf, 0)
        if count == 0:
            raise _Malformed("mutation has no partition update")
        updates = []
        for index in range(count):
            context[0] = index
            context[1] = None
            context[2] = pos
            update, pos = _decode_update(buf, pos, catalog, messaging_version, context, segment, offset)
            updates.append(update)
        if pos != len(buf):
            if pos > len(buf):
                raise _Malformed(f"truncated: needs {pos} bytes, has {len(buf)}")
            raise _Malformed(f"{len(buf) - pos} trailing bytes after the last partition update")
        return updates
    except UnknownTableError:
        raise
    except DECODE_ERRORS as exc:
        if exc.segment is not None or exc.offset is not None:
            raise
        reason = f"{_where(context, len(buf))}: {exc.reason}"
        if isinstance(exc, UnknownColumnError):
            raise UnknownColumnError(reason, segment=segment, offset=offset, column=exc.column) from exc
        raise type(exc)(reason, segment=segment, offset=offset) from exc
    except (_Malformed, IndexError, struct.error, ValueError, OverflowError, KeyError, TypeError) as exc:
        reason = str(exc) if isinstance(exc, _Malformed) else f"truncated or malformed ({exc!r})"
        raise MutationDecodeError(
            f"{_where(context, len(buf))}: {reason}", segment=segment, offset=offset
        ) from exc


def _where(context: list[object], size: int) -> str:
    where = f"partition update {context[0]}"
    if context[1] is not None:
        where += f" of table {context[1]}"
    return where + f" starting at byte {context[2]} of {size}"


def _read_deletion(buf: bytes, pos: int, min_ts: int, min_ldt: int) -> tuple[int, int, int]:
    """A DeletionTime in delta form: (markedForDeleteAt, localDeletionTime, next position)."""
    v, pos = _uvint(buf, pos)
    ts = _s64(min_ts + v)
    v, pos = _uvint(buf, pos)
    return ts, _ldt(min_ldt, v), pos


def _read_header(
    buf: bytes, pos: int, schema: TableSchema, info: _TableInfo, static: bool
) -> tuple[_Header, int]:
    last = info.last[static]
    if last is not None and buf.startswith(last[0], pos):
        return last[1], pos + len(last[0])
    start = pos
    count, pos = _uvint(buf, pos)
    for _ in range(count):
        b = buf[pos]
        if b < 0x80:
            pos += 1 + b
        else:
            size, pos = _uvint(buf, pos)
            pos += size
    if pos > len(buf):
        raise _Malformed("truncated column header")
    raw = buf[start:pos]
    key = (static, raw)
    cache = schema.decoder_cache
    header = cache.get(key)
    if header is None:
        header = _resolve_header(buf, start, count, schema, static)
        if len(cache) >= _HEADER_CACHE_LIMIT:
            cache.clear()
            cache[None] = info
        cache[key] = header
    info.last[static] = (raw, header)
    return header, pos


def _resolve_header(buf: bytes, pos: int, count: int, schema: TableSchema, static: bool) -> _Header:
    _, pos = _uvint(buf, pos)
    columns = []
    for _ in range(count):
        size, pos = _uvint(buf, pos)
        name = buf[pos : pos + size].decode("utf-8")
        pos += size
        column = schema.header_column(name)
        if column is None:
            kind = "static" if static else "regular"
            raise UnknownColumnError(
                f"unknown {kind} column {name!r} in table {schema.name}", column=f"{schema.name}.{name}"
            )
        columns.append(_column(column, schema.dropped_time(name)))
    return _Header(tuple(columns))


def _read_subset(buf: bytes, pos: int, header: _Header) -> tuple[tuple[_Column, ...], int]:
    """Columns of a row without HAS_ALL_COLUMNS (§7.8)."""
    b = buf[pos]
    if b < 0x80:
        encoded = b
        pos += 1
    else:
        encoded, pos = _uvint(buf, pos)
    columns = header.columns
    if encoded == 0:
        return columns, pos
    total = len(columns)
    if total < 64:
        subset = header.subsets.get(encoded)
        if subset is None:
            subset = tuple(c for i, c in enumerate(columns) if not (encoded >> i) & 1)
            header.subsets[encoded] = subset
        return subset, pos
    missing = encoded
    present = total - missing
    if present < 0:
        raise _Malformed(f"column subset misses {missing} of {total} columns")
    chosen = []
    if present < total // 2:
        for _ in range(present):
            index, pos = _uvint(buf, pos)
            chosen.append(columns[index])
    else:
        index = 0
        for _ in range(missing):
            next_missing, pos = _uvint(buf, pos)
            if next_missing < index or next_missing >= total:
                raise _Malformed(f"column subset index {next_missing} out of order or range")
            chosen.extend(columns[index:next_missing])
            index = next_missing + 1
        chosen.extend(columns[index:])
    return tuple(chosen), pos


def _read_clustering(
    buf: bytes, pos: int, fixed: tuple[int, ...], size: int
) -> tuple[tuple[bytes | None, ...], int]:
    """``size`` clustering values in 32-column batches, each after a 2-bits-per-column header (§7.6)."""
    values: list[bytes | None] = []
    index = 0
    while index < size:
        b = buf[pos]
        if b < 0x80:
            header = b
            pos += 1
        else:
            header, pos = _uvint(buf, pos)
        limit = min(size, index + 32)
        shift = 0
        while index < limit:
            if header >> shift & 2:
                values.append(None)
            elif header >> shift & 1:
                values.append(_EMPTY)
            else:
                length = fixed[index]
                if length < 0:
                    b = buf[pos]
                    if b < 0x80:
                        length = b
                        pos += 1
                    else:
                        length, pos = _uvint(buf, pos)
                values.append(buf[pos : pos + length])
                pos += length
            index += 1
            shift += 2
    return tuple(values), pos


def _decode_update(
    buf: bytes,
    pos: int,
    catalog: SchemaCatalog,
    version: int,
    context: list[object],
    segment: str | None,
    offset: int | None,
) -> tuple[PartitionUpdate, int]:
    raw_id = buf[pos : pos + 16]
    pos += 16
    if pos > len(buf):
        raise _Malformed("truncated table id")
    schema = catalog.get_raw(raw_id)
    if schema is None:
        raise UnknownTableError(str(uuid.UUID(bytes=raw_id)), segment=segment, offset=offset)
    context[1] = schema.name
    if version >= 14:
        _, pos = _uvint(buf, pos)  # trunk: TCM epoch
    b = buf[pos]
    if b < 0x80:
        size = b
        pos += 1
    else:
        size, pos = _uvint(buf, pos)
    key = buf[pos : pos + size]
    pos += size
    flags = buf[pos]
    pos += 1
    if flags & _PU_IS_EMPTY:
        return PartitionUpdate(
            schema, key, None, None, [], [], schema.is_counter, version, segment, offset
        ), pos
    v, pos = _uvint(buf, pos)
    min_ts = _s64(TIMESTAMP_EPOCH + v)
    b = buf[pos]
    if b < 0x80:
        min_ldt = DELETION_TIME_EPOCH + b
        pos += 1
    else:
        v, pos = _uvint(buf, pos)
        min_ldt = DELETION_TIME_EPOCH + _s32(v)
    b = buf[pos]
    if b < 0x80:
        min_ttl = b
        pos += 1
    else:
        v, pos = _uvint(buf, pos)
        min_ttl = _s32(v)
    info = schema.decoder_cache.get(None)
    if info is None:
        info = schema.decoder_cache[None] = _TableInfo(schema)
    statics = _NO_COLUMNS
    if flags & _PU_HAS_STATIC_ROW:
        statics, pos = _read_header(buf, pos, schema, info, True)
    regulars, pos = _read_header(buf, pos, schema, info, False)
    partition_deletion = None
    if flags & _PU_HAS_PARTITION_DELETION:
        ts, ldt, pos = _read_deletion(buf, pos, min_ts, min_ldt)
        if ts != _LIVE:
            partition_deletion = DeletionTime(ts, ldt)
    static_row = None
    if flags & _PU_HAS_STATIC_ROW:
        row_flags = buf[pos]
        ext = buf[pos + 1] if row_flags & _EXTENSION_FLAG else 0
        if not ext & _IS_STATIC:
            raise _Malformed("the static row is not flagged static")
        pos += 2
        static_row, pos = _read_row(buf, pos, row_flags, ext, statics, min_ts, min_ldt, min_ttl, (), ())
    if flags & _PU_HAS_ROW_ESTIMATE:
        if buf[pos] < 0x80:
            pos += 1
        else:
            _, pos = _uvint(buf, pos)

    types = info.types
    fixed = info.fixed
    n_clustering = len(types)
    rows: list[Row] = []
    markers: list[RangeTombstoneBound | RangeTombstoneBoundary] = []
    while True:
        row_flags = buf[pos]
        pos += 1
        if row_flags & _END_OF_PARTITION:
            break
        ext = 0
        if row_flags & _EXTENSION_FLAG:
            ext = buf[pos]
            pos += 1
        if row_flags & _IS_MARKER:
            marker, pos = _read_marker(buf, pos, types, fixed, min_ts, min_ldt)
            markers.append(marker)
            continue
        if ext & _IS_STATIC:
            raise _Malformed("a static row after the partition header")
        if n_clustering:
            clustering, pos = _read_clustering(buf, pos, fixed, n_clustering)
        else:
            clustering = ()
        row, pos = _read_row(buf, pos, row_flags, ext, regulars, min_ts, min_ldt, min_ttl, clustering, types)
        if row is not None:
            rows.append(row)
    update = PartitionUpdate(
        schema,
        key,
        partition_deletion,
        static_row,
        rows,
        markers,
        schema.is_counter,
        version,
        segment,
        offset,
    )
    return update, pos


def _read_marker(
    buf: bytes, pos: int, types: tuple[CqlType, ...], fixed: tuple[int, ...], min_ts: int, min_ldt: int
) -> tuple[RangeTombstoneBound | RangeTombstoneBoundary, int]:
    kind_byte = buf[pos]
    if kind_byte > 7 or kind_byte in (BoundKind.STATIC_CLUSTERING, BoundKind.CLUSTERING):
        raise _Malformed(f"range tombstone marker of kind {kind_byte}")
    kind = BoundKind(kind_byte)
    size = _U16.unpack_from(buf, pos + 1)[0]
    pos += 3
    if size > len(types):
        raise _Malformed(
            f"range tombstone bound of {size} values, the table has {len(types)} clustering columns"
        )
    prefix: tuple[bytes | None, ...] = ()
    if size:
        prefix, pos = _read_clustering(buf, pos, fixed, size)
    prefix_types = types[:size]
    ts, ldt, pos = _read_deletion(buf, pos, min_ts, min_ldt)
    if kind.is_boundary:
        ts2, ldt2, pos = _read_deletion(buf, pos, min_ts, min_ldt)
        return RangeTombstoneBoundary(
            kind, prefix, prefix_types, DeletionTime(ts, ldt), DeletionTime(ts2, ldt2)
        ), pos
    return RangeTombstoneBound(kind, prefix, prefix_types, DeletionTime(ts, ldt)), pos


def _read_row(
    buf: bytes,
    pos: int,
    flags: int,
    ext: int,
    header: _Header,
    min_ts: int,
    min_ldt: int,
    min_ttl: int,
    clustering: tuple[bytes | None, ...],
    types: tuple[CqlType, ...],
) -> tuple[Row | None, int]:
    """One row body (§7.5); None when it decodes as empty (e.g. only cells of dropped columns)."""
    timestamp = None
    row_ts = _LIVE
    row_ttl = 0
    row_ldt = NO_DELETION_TIME
    expiration = None
    if flags & _HAS_TIMESTAMP:
        b = buf[pos]
        if b < 0x80:
            row_ts = min_ts + b
            pos += 1
        else:
            v, pos = _uvint(buf, pos)
            row_ts = _s64(min_ts + v)
        timestamp = row_ts
        if flags & _HAS_TTL:
            v, pos = _uvint(buf, pos)
            row_ttl = _s32(min_ttl + _s32(v))
            v, pos = _uvint(buf, pos)
            row_ldt = expiration = _ldt(min_ldt, v)
    deletion = None
    if flags & _HAS_DELETION:
        ts, ldt, pos = _read_deletion(buf, pos, min_ts, min_ldt)
        deletion = DeletionTime(ts, ldt)
    if flags & _HAS_ALL_COLUMNS:
        columns = header.columns
    else:
        columns, pos = _read_subset(buf, pos, header)
    cells: list[Cell] = []
    append = cells.append
    complex_deletions: list[ComplexDeletion] = []
    for column, complex_, length, dropped in columns:
        if complex_:
            pos = _read_complex(
                buf,
                pos,
                column,
                dropped,
                flags,
                min_ts,
                min_ldt,
                min_ttl,
                row_ts,
                row_ttl,
                row_ldt,
                cells,
                complex_deletions,
            )
            continue
        cell_flags = buf[pos]
        pos += 1
        if cell_flags & _USE_ROW_TIMESTAMP:
            ts = row_ts
        else:
            b = buf[pos]
            if b < 0x80:
                ts = min_ts + b
                pos += 1
            else:
                v, pos = _uvint(buf, pos)
                ts = _s64(min_ts + v)
        if cell_flags & _USE_ROW_TTL:
            ldt = row_ldt
            ttl = row_ttl
        elif cell_flags & _DELETED_OR_EXPIRING:
            v, pos = _uvint(buf, pos)
            ldt = _ldt(min_ldt, v)
            if cell_flags & _IS_EXPIRING:
                v, pos = _uvint(buf, pos)
                ttl = _s32(min_ttl + _s32(v))
            else:
                ttl = 0
        else:
            ldt = NO_DELETION_TIME
            ttl = 0
        if cell_flags & _HAS_EMPTY_VALUE:
            raw = _EMPTY
        else:
            if length < 0:
                b = buf[pos]
                if b < 0x80:
                    length = b
                    pos += 1
                else:
                    length, pos = _uvint(buf, pos)
            raw = buf[pos : pos + length]
            pos += length
        if dropped is not None and ts <= dropped:
            continue
        append(Cell(column, cell_flags, ts, ttl, ldt, None, raw))
    if timestamp is None and deletion is None and not cells and not complex_deletions:
        return None, pos
    return Row(
        clustering,
        types,
        timestamp,
        row_ttl,
        expiration,
        deletion,
        cells,
        complex_deletions,
        bool(ext & _IS_STATIC),
        bool(ext & _HAS_SHADOWABLE_DELETION),
    ), pos


def _read_complex(
    buf: bytes,
    pos: int,
    column: ColumnSchema,
    dropped: int | None,
    flags: int,
    min_ts: int,
    min_ldt: int,
    min_ttl: int,
    row_ts: int,
    row_ttl: int,
    row_ldt: int,
    cells: list[Cell],
    complex_deletions: list[ComplexDeletion],
) -> int:
    """A complex column (§7.10): optional complex deletion, then a count of cells that carry a path.

    The cell-time reading below mirrors the simple-cell loop in _read_row on purpose: that loop is the
    decoder's hot path and stays inlined (a call per cell would cost about a tenth of structure decoding).
    """
    if flags & _HAS_COMPLEX_DELETION:
        ts, ldt, pos = _read_deletion(buf, pos, min_ts, min_ldt)
        if ts != _LIVE and (dropped is None or ts > dropped):
            complex_deletions.append(ComplexDeletion(column, DeletionTime(ts, ldt)))
    count, pos = _uvint(buf, pos)
    for _ in range(count):
        cell_flags = buf[pos]
        pos += 1
        if cell_flags & _USE_ROW_TIMESTAMP:
            ts = row_ts
        else:
            v, pos = _uvint(buf, pos)
            ts = _s64(min_ts + v)
        if cell_flags & _USE_ROW_TTL:
            ldt = row_ldt
            ttl = row_ttl
        elif cell_flags & _DELETED_OR_EXPIRING:
            v, pos = _uvint(buf, pos)
            ldt = _ldt(min_ldt, v)
            if cell_flags & _IS_EXPIRING:
                v, pos = _uvint(buf, pos)
                ttl = _s32(min_ttl + _s32(v))
            else:
                ttl = 0
        else:
            ldt = NO_DELETION_TIME
            ttl = 0
        size, pos = _uvint(buf, pos)
        path = buf[pos : pos + size]
        pos += size
        if cell_flags & _HAS_EMPTY_VALUE:
            raw = _EMPTY
        else:
            size, pos = _uvint(buf, pos)
            raw = buf[pos : pos + size]
            pos += size
        if dropped is not None and ts <= dropped:
            continue
        cells.append(Cell(column, cell_flags, ts, ttl, ldt, path, raw))
    return pos

"""Bytes of a stored row and of a stored partition header, versioned by their first byte.

Why a hand-written struct format and not pickle: on a narrow row (liveness, an int, a 25-byte text and a
bigint) this format encodes in 1.8 µs and decodes in 3.7 µs to 119 bytes (the 9-byte prefix included);
pickle of the same data as plain tuples takes 1.9/2.5 µs for 170 bytes, pickle of the dataclasses
8.9/7.1 µs for 456 bytes. Size decides: it is disk, block cache and changelog bytes for every one of
millions of rows, and the speed is about even (decoding and encoding are a sixth of an event's cost
in bench/state_store.py).
The format is also canonical (columns, elements and deletions in sorted order), so equal states give
equal bytes: a save skips unchanged rows by comparing bytes, and two stores that merged the same events
in different orders hold the same bytes.

Every value is ``u8 version | u64 due second (0: none) | body``; the due second is the row's (or
header's) entry in the due index, kept here so that a save can delete the old entry without recomputing
what the row looked like when it was indexed.

Row body::

    u8 clustering count, per value: i32 length (-1: null) + bytes
    u8 flags: 1 liveness, 2 liveness has TTL/expiry fields, 4 liveness expiry present, 8 row deletion,
              16 complex columns or complex deletions follow
    [liveness: i64 timestamp [i32 ttl] [i64 local expiration time]]
    [deletion: i64 timestamp, i64 local deletion time]
    u32 simple cell count, per cell: u16 name length + name, cell
    [u32 complex column count, per column: name, u32 element count, per element: cell
     u32 complex deletion count, per deletion: name, i64 timestamp, i64 local deletion time]

Cell: ``u8 head`` (Cell.flags in the low 4 bits; 0x10 TTL and local deletion time follow, else they are
0 and NO_DELETION_TIME; 0x20 a path follows; 0x40 an element key that differs from the path follows: the
complex-cell dict is keyed by ``ColumnLayout.path_key(path)``, which is not always the path),
``i64 timestamp [i32 ttl, i64 local deletion time] [u32 + path] [u32 + element key] u32 + value``.

Header body: ``u8 flags`` (1 partition deletion, 2 static row, 4 range tombstones), then the deletion
(i64, i64), the static row (u32 length + row body) and the range tombstones (u32 count, per piece
u32 + start, u32 + end, i64 timestamp, i64 local deletion time).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from state.cell_merge import NO_DELETION_TIME, Cell, Deletion, Liveness
from state.errors import StoreError
from state.partition_state import PartitionState
from state.range_tombstones import RangeTombstoneList
from state.row_state import RowState

VERSION = 1

_PREFIX = struct.Struct(">BQ")
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I64_I64 = struct.Struct(">qq")
_I64_I32 = struct.Struct(">qi")
_CELL_PLAIN = struct.Struct(">Bq")
_CELL_TIMED = struct.Struct(">Bqiq")
#: a plain live simple cell (head 0) up to its value's length: the fast path both ways
_PLAIN_CELL = struct.Struct(">BqI")

_LIVENESS = 1
_LIVENESS_TTL = 2
_LIVENESS_EXPIRY = 4
_DELETION = 8
_COMPLEX = 16

_CELL_FLAGS = 0x0F
_CELL_TIMES = 0x10
_CELL_PATH = 0x20
_CELL_KEY = 0x40

_HEADER_DELETION = 1
_HEADER_STATIC = 2
_HEADER_RANGES = 4

_NULL = _I32.pack(-1)

#: name <-> length-prefixed bytes, both ways, so that hot rows do not encode/decode names each time
_NAME_BYTES: dict[str, bytes] = {}
_NAMES: dict[bytes, str] = {}


def _name_bytes(name: str) -> bytes:
    found = _NAME_BYTES.get(name)
    if found is None:
        raw = name.encode()
        if len(raw) > 0xFFFF:
            raise StoreError(f"column name {name[:40]!r}... is longer than 65535 bytes")
        if len(_NAME_BYTES) > 65536:
            _NAME_BYTES.clear()
        found = _NAME_BYTES[name] = _U16.pack(len(raw)) + raw
    return found


def _name(data: bytes, pos: int) -> tuple[str, int]:
    end = pos + 2 + _U16.unpack_from(data, pos)[0]
    raw = data[pos + 2 : end]
    name = _NAMES.get(raw)
    if name is None:
        if len(_NAMES) > 65536:
            _NAMES.clear()
        name = _NAMES[raw] = raw.decode()
    return name, end


# ---------------------------------------------------------------------------------------------------------
# encoding


def _encode_cell(out: list[bytes], cell: Cell, key: bytes | None) -> None:
    flags = cell.flags
    if flags & ~_CELL_FLAGS:
        raise StoreError(f"cell flags {flags:#x} do not fit the store format (at most {_CELL_FLAGS:#x})")
    path = cell.path
    other_key = key if key is not None and key != path else None
    if path is not None:
        flags |= _CELL_PATH
    if other_key is not None:
        flags |= _CELL_KEY
    if cell.ttl == 0 and cell.local_deletion_time == NO_DELETION_TIME:
        out.append(_CELL_PLAIN.pack(flags, cell.timestamp))
    else:
        out.append(_CELL_TIMED.pack(flags | _CELL_TIMES, cell.timestamp, cell.ttl, cell.local_deletion_time))
    if path is not None:
        out.append(_U32.pack(len(path)))
        out.append(path)
    if other_key is not None:
        out.append(_U32.pack(len(other_key)))
        out.append(other_key)
    value = cell.value
    out.append(_U32.pack(len(value)))
    out.append(value)


def _encode_row_body(out: list[bytes], row: RowState) -> None:
    clustering = row.clustering
    if len(clustering) > 255:
        raise StoreError(f"a row has {len(clustering)} clustering values; the store format holds 255")
    out.append(_U8.pack(len(clustering)))
    for value in clustering:
        if value is None:
            out.append(_NULL)
        else:
            out.append(_I32.pack(len(value)))
            out.append(value)
    flags = 0
    liveness = row.liveness
    parts: list[bytes] = []
    if liveness is not None:
        flags |= _LIVENESS
        parts.append(_I64.pack(liveness.timestamp))
        if liveness.ttl or liveness.local_expiration_time is not None:
            flags |= _LIVENESS_TTL
            parts.append(_I32.pack(liveness.ttl))
            if liveness.local_expiration_time is not None:
                flags |= _LIVENESS_EXPIRY
                parts.append(_I64.pack(liveness.local_expiration_time))
    if row.deletion is not None:
        flags |= _DELETION
        parts.append(_I64_I64.pack(row.deletion.timestamp, row.deletion.local_deletion_time))
    if row.complex_cells or row.complex_deletions:
        flags |= _COMPLEX
    out.append(_U8.pack(flags))
    out.extend(parts)
    cells = row.cells
    out.append(_U32.pack(len(cells)))
    for name in sorted(cells) if len(cells) > 1 else cells:
        cell = cells[name]
        if (
            not cell.flags
            and cell.path is None
            and not cell.ttl
            and cell.local_deletion_time == NO_DELETION_TIME
        ):
            value = cell.value
            out.append(_name_bytes(name) + _PLAIN_CELL.pack(0, cell.timestamp, len(value)))
            out.append(value)
        else:
            out.append(_name_bytes(name))
            _encode_cell(out, cell, None)
    if flags & _COMPLEX:
        out.append(_U32.pack(len(row.complex_cells)))
        for name in sorted(row.complex_cells):
            elements = row.complex_cells[name]
            out.append(_name_bytes(name))
            out.append(_U32.pack(len(elements)))
            for key in sorted(elements):
                _encode_cell(out, elements[key], key)
        out.append(_U32.pack(len(row.complex_deletions)))
        for name in sorted(row.complex_deletions):
            deletion = row.complex_deletions[name]
            out.append(_name_bytes(name))
            out.append(_I64_I64.pack(deletion.timestamp, deletion.local_deletion_time))


#: a native writer of ``encode_row_value``'s bytes (``cdc_native.encode_row_value(row, due_s)``), or None:
#: it writes rows of simple cells and returns None for any other row, which this module writes
NativeRowEncoder = Callable[[RowState, int], bytes | None]
_native_row_value: NativeRowEncoder | None = None


def use_native_row_encoder(encoder: NativeRowEncoder | None) -> None:
    """Let ``encoder`` write the stored rows it can (the worker's native core, see app/worker_core.py);
    None: this module writes them all. Both write the same bytes (tests hold them to it)."""
    global _native_row_value
    _native_row_value = encoder


def encode_row_value(row: RowState, due_s: int | None) -> bytes:
    """A stored row value: the row and its entry in the due index (None: not indexed)."""
    if _native_row_value is not None:
        encoded = _native_row_value(row, due_s or 0)
        if encoded is not None:
            return encoded
    return python_row_value(row, due_s)


def python_row_value(row: RowState, due_s: int | None) -> bytes:
    """``encode_row_value`` in Python: the specification of the native writer."""
    out = [_PREFIX.pack(VERSION, due_s or 0)]
    _encode_row_body(out, row)
    return b"".join(out)


def encode_header_value(
    partition_deletion: Deletion | None,
    static_row: RowState | None,
    range_tombstones: RangeTombstoneList,
    due_s: int | None,
) -> bytes:
    """A stored partition header value (what a partition holds besides its clustering rows)."""
    out = [_PREFIX.pack(VERSION, due_s or 0)]
    flags = (
        (_HEADER_DELETION if partition_deletion is not None else 0)
        | (_HEADER_STATIC if static_row is not None else 0)
        | (_HEADER_RANGES if range_tombstones else 0)
    )
    out.append(_U8.pack(flags))
    if partition_deletion is not None:
        out.append(_I64_I64.pack(partition_deletion.timestamp, partition_deletion.local_deletion_time))
    if static_row is not None:
        body: list[bytes] = []
        _encode_row_body(body, static_row)
        joined = b"".join(body)
        out.append(_U32.pack(len(joined)))
        out.append(joined)
    if range_tombstones:
        out.append(_U32.pack(len(range_tombstones)))
        for start, end, deletion in range_tombstones:
            out.append(_U32.pack(len(start)))
            out.append(start)
            out.append(_U32.pack(len(end)))
            out.append(end)
            out.append(_I64_I64.pack(deletion.timestamp, deletion.local_deletion_time))
    return b"".join(out)


# ---------------------------------------------------------------------------------------------------------
# decoding


def _bytes(data: bytes, pos: int) -> tuple[bytes, int]:
    end = pos + 4 + _U32.unpack_from(data, pos)[0]
    if end > len(data):
        raise StoreError(f"a length at byte {pos} runs past the end ({len(data)} bytes)")
    return data[pos + 4 : end], end


def _decode_cell(data: bytes, pos: int) -> tuple[Cell, bytes | None, int]:
    head = data[pos]
    if head & _CELL_TIMES:
        _, timestamp, ttl, ldt = _CELL_TIMED.unpack_from(data, pos)
        pos += _CELL_TIMED.size
    else:
        timestamp = _I64.unpack_from(data, pos + 1)[0]
        ttl, ldt = 0, NO_DELETION_TIME
        pos += _CELL_PLAIN.size
    path = key = None
    if head & _CELL_PATH:
        path, pos = _bytes(data, pos)
        key = path
    if head & _CELL_KEY:
        key, pos = _bytes(data, pos)
    value, pos = _bytes(data, pos)
    return Cell(timestamp, ttl, ldt, head & _CELL_FLAGS, value, path), key, pos


def _decode_row_body(data: bytes, pos: int) -> tuple[RowState, int]:
    count = data[pos]
    pos += 1
    clustering: list[bytes | None] = []
    for _ in range(count):
        size = _I32.unpack_from(data, pos)[0]
        pos += 4
        if size < 0:
            clustering.append(None)
        else:
            clustering.append(data[pos : pos + size])
            pos += size
    flags = data[pos]
    pos += 1
    liveness = deletion = None
    if flags & _LIVENESS:
        timestamp = _I64.unpack_from(data, pos)[0]
        pos += 8
        ttl = 0
        expiry = None
        if flags & _LIVENESS_TTL:
            ttl = _I32.unpack_from(data, pos)[0]
            pos += 4
            if flags & _LIVENESS_EXPIRY:
                expiry = _I64.unpack_from(data, pos)[0]
                pos += 8
        liveness = Liveness(timestamp, ttl, expiry)
    if flags & _DELETION:
        deletion = Deletion(*_I64_I64.unpack_from(data, pos))
        pos += 16
    cells: dict[str, Cell] = {}
    count = _U32.unpack_from(data, pos)[0]
    pos += 4
    names = _NAMES
    for _ in range(count):
        end = pos + 2 + _U16.unpack_from(data, pos)[0]
        raw = data[pos + 2 : end]
        name = names.get(raw)
        if name is None:
            name, _ = _name(data, pos)
        pos = end
        if data[pos]:
            cells[name], _, pos = _decode_cell(data, pos)
            continue
        _, timestamp, size = _PLAIN_CELL.unpack_from(data, pos)
        pos += _PLAIN_CELL.size
        cells[name] = Cell(timestamp, 0, NO_DELETION_TIME, 0, data[pos : pos + size])
        pos += size
    complex_cells: dict[str, dict[bytes, Cell]] = {}
    complex_deletions: dict[str, Deletion] = {}
    if flags & _COMPLEX:
        count = _U32.unpack_from(data, pos)[0]
        pos += 4
        for _ in range(count):
            name, pos = _name(data, pos)
            elements: dict[bytes, Cell] = {}
            size = _U32.unpack_from(data, pos)[0]
            pos += 4
            for _ in range(size):
                cell, key, pos = _decode_cell(data, pos)
                elements[key if key is not None else b""] = cell
            complex_cells[name] = elements
        count = _U32.unpack_from(data, pos)[0]
        pos += 4
        for _ in range(count):
            name, pos = _name(data, pos)
            complex_deletions[name] = Deletion(*_I64_I64.unpack_from(data, pos))
            pos += 16
    return RowState(tuple(clustering), liveness, deletion, cells, complex_cells, complex_deletions), pos


def _refuse_version(data: bytes, what: str) -> None:
    found = data[0] if data else "nothing"
    raise StoreError(f"{what} has store format version {found}; this code reads version {VERSION}")


def stored_due(data: bytes) -> int | None:
    """The due-index second carried by a stored row or header value (None: not indexed)."""
    due = _PREFIX.unpack_from(data)[1]
    return due or None


#: a native reader of ``decode_row_value``'s rows (``cdc_native.RowReader(...).decode(data)``), or None: it
#: reads rows of simple cells and returns None for any other value, which this module reads
NativeRowDecoder = Callable[[bytes], RowState | None]
_native_row_state: NativeRowDecoder | None = None


def use_native_row_decoder(decoder: NativeRowDecoder | None) -> None:
    """Let ``decoder`` read the stored rows it can (the worker's native core, see app/worker_core.py);
    None: this module reads them all. Both return equal rows (tests hold them to it)."""
    global _native_row_state
    _native_row_state = decoder


def decode_row_value(data: bytes, key: bytes = b"") -> RowState:
    """The row of a stored row value (``key`` only names it in errors)."""
    if _native_row_state is not None:
        row = _native_row_state(data)
        if row is not None:
            return row
    return python_row_state(data, key)


def python_row_state(data: bytes, key: bytes = b"") -> RowState:
    """``decode_row_value`` in Python: the specification of the native reader."""
    if not data or data[0] != VERSION:
        _refuse_version(data, f"the stored row {key.hex()}")
    try:
        row, end = _decode_row_body(data, _PREFIX.size)
    except (struct.error, IndexError, UnicodeDecodeError, StoreError) as exc:
        raise StoreError(
            f"the stored row {key.hex()} ({len(data)} bytes) is truncated or damaged: {exc}"
        ) from exc
    if end != len(data):
        raise StoreError(f"the stored row {key.hex()} has {len(data) - end} bytes after its end")
    return row


def decode_header_value(partition_key: bytes, data: bytes) -> PartitionState:
    """A partition state holding a stored header (and no clustering rows)."""
    if not data or data[0] != VERSION:
        _refuse_version(data, f"the header of partition {partition_key.hex()}")
    try:
        state, end = _decode_header(partition_key, data)
    except (struct.error, IndexError, UnicodeDecodeError, StoreError) as exc:
        raise StoreError(
            f"the header of partition {partition_key.hex()} ({len(data)} bytes) is truncated or damaged: {exc}"
        ) from exc
    if end != len(data):
        raise StoreError(
            f"the header of partition {partition_key.hex()} has {len(data) - end} bytes after its end"
        )
    return state


def _decode_header(partition_key: bytes, data: bytes) -> tuple[PartitionState, int]:
    pos = _PREFIX.size
    flags = data[pos]
    pos += 1
    state = PartitionState(partition_key)
    if flags & _HEADER_DELETION:
        state.partition_deletion = Deletion(*_I64_I64.unpack_from(data, pos))
        pos += 16
    if flags & _HEADER_STATIC:
        size = _U32.unpack_from(data, pos)[0]
        pos += 4
        state.static_row, end = _decode_row_body(data, pos)
        if end != pos + size:
            raise StoreError("its static row has a wrong length")
        pos = end
    if flags & _HEADER_RANGES:
        count = _U32.unpack_from(data, pos)[0]
        pos += 4
        ranges = state.range_tombstones
        for _ in range(count):
            start, pos = _bytes(data, pos)
            end_bound, pos = _bytes(data, pos)
            ranges.starts.append(start)
            ranges.ends.append(end_bound)
            ranges.deletions.append(Deletion(*_I64_I64.unpack_from(data, pos)))
            pos += 16
    return state, pos

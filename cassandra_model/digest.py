"""Digests of decoded partition updates.

``update_digest``: an MD5 that is the same for every replica's copy of one write, so copies read from
several nodes' commit logs can be de-duplicated. It covers only what the write contains, never where or
how it was logged (no segment, offset, messaging version, EncodingStats, column-header order or cell
flags such as USE_ROW_TIMESTAMP). Canonical bytes, all integers big-endian:

* ``b"cdc-pu-v1"``, the 16 table-id bytes, the partition key (u32 length + bytes);
* partition deletion: ``D`` + markedForDeleteAt (i64) + localDeletionTime (i64), or ``-`` when none;
* static row: ``S`` + row, or ``-``; then u32 row count and each row, in log (clustering) order;
* u32 range-tombstone-marker count and each marker in log order: kind (u8), clustering prefix, then one
  deletion (bound) or the end and start deletions (boundary);
* a row: clustering (u32 count, each value as u32 length + bytes, or 0xFFFFFFFF for null); liveness
  ``L`` + timestamp (i64) + ttl (i64) + local expiration time (i64, -1 when not expiring) or ``-``; row
  deletion; u32 count of complex deletions sorted by column name, each name + deletion; u32 cell count and
  the cells sorted by (column name bytes, path bytes), each: column name, path (or null), state (u8:
  0 live, 1 tombstone, 2 expiring), timestamp (i64), ttl (i64), localDeletionTime (i64), value.

``upstream_hash``: the cell count and additive hash Cassandra's CommitLogUpgradeTest checks against each
fixture's hash.txt (format notes §11.3).
"""

from __future__ import annotations

import hashlib
import struct
import uuid
from collections.abc import Iterable
from typing import Protocol

from cassandra_model.partition_update import (
    DeletionTime,
    PartitionUpdate,
    RangeTombstoneBound,
    RangeTombstoneBoundary,
    Row,
)

_Q = struct.Struct(">q")
_I = struct.Struct(">I")
_QQ = struct.Struct(">qq")
_QQQ = struct.Struct(">qqq")
_NULL = b"\xff\xff\xff\xff"


class _Sink(Protocol):
    def update(self, data: bytes, /) -> None: ...


def _blob(out: _Sink, data: bytes | None) -> None:
    if data is None:
        out.update(_NULL)
    else:
        out.update(_I.pack(len(data)))
        out.update(data)


def _deletion(out: _Sink, deletion: DeletionTime | None) -> None:
    if deletion is None:
        out.update(b"-")
    else:
        out.update(b"D")
        out.update(_QQ.pack(deletion.marked_for_delete_at, deletion.local_deletion_time))


def _prefix(out: _Sink, values: tuple[bytes | None, ...]) -> None:
    out.update(_I.pack(len(values)))
    for value in values:
        _blob(out, value)


def _row(out: _Sink, row: Row) -> None:
    _prefix(out, row.clustering_raw)
    if row.timestamp is None:
        out.update(b"-")
    else:
        expiration = -1 if row.local_expiration_time is None else row.local_expiration_time
        out.update(b"L")
        out.update(_QQQ.pack(row.timestamp, row.ttl, expiration))
    _deletion(out, row.deletion)
    complex_deletions = sorted(row.complex_deletions, key=lambda d: d.column.name.encode())
    out.update(_I.pack(len(complex_deletions)))
    for complex_deletion in complex_deletions:
        _blob(out, complex_deletion.column.name.encode())
        _deletion(out, complex_deletion.deletion)
    cells = sorted(row.cells, key=lambda c: (c.column.name.encode(), c.path or b""))
    out.update(_I.pack(len(cells)))
    for cell in cells:
        _blob(out, cell.column.name.encode())
        _blob(out, cell.path)
        state = 1 if cell.flags & 0x01 else (2 if cell.flags & 0x02 else 0)
        out.update(bytes((state,)))
        out.update(_QQQ.pack(cell.timestamp, cell.ttl, cell.local_deletion_time))
        _blob(out, cell.raw)


def digest_head(table_id: uuid.UUID) -> bytes:
    """What every canonical digest of a table's partition updates starts with: the format's version and
    the table id (the module docstring); the bootstrap's encoders start theirs from it too."""
    return b"cdc-pu-v1" + table_id.bytes


def update_digest(update: PartitionUpdate) -> bytes:
    """The 16-byte canonical MD5 of one partition update (see the module docstring)."""
    out = hashlib.md5(digest_head(update.table_id))
    _blob(out, update.partition_key)
    _deletion(out, update.partition_deletion)
    if update.static_row is None:
        out.update(b"-")
    else:
        out.update(b"S")
        _row(out, update.static_row)
    out.update(_I.pack(len(update.rows)))
    for row in update.rows:
        _row(out, row)
    out.update(_I.pack(len(update.range_tombstones)))
    for marker in update.range_tombstones:
        out.update(bytes((int(marker.kind),)))
        _prefix(out, marker.clustering_raw)
        if isinstance(marker, RangeTombstoneBoundary):
            _deletion(out, marker.end_deletion)
            _deletion(out, marker.start_deletion)
        elif isinstance(marker, RangeTombstoneBound):
            _deletion(out, marker.deletion)
    return out.digest()


def update_digest_hex(update: PartitionUpdate) -> str:
    return update_digest(update).hex()


def _int32(value: int) -> int:
    return ((value + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def upstream_value_hash(h: int, value: bytes) -> int:
    """CommitLogUpgradeTest's ``hash(h, bytes)``: add byte i shifted left by 8*(i mod 4), in int32.

    That is the sum of the value read as little-endian 32-bit words, which is how it is computed here.
    """
    padded = value + b"\0" * (-len(value) % 4)
    return _int32(h + sum(struct.unpack(f"<{len(padded) // 4}I", padded)))


def upstream_hash(updates: Iterable[PartitionUpdate], table_id: uuid.UUID | None = None) -> tuple[int, int]:
    """(cells, hash) over rows whose first clustering value starts with ``name`` (the fixture rule).

    Only updates of ``table_id`` count when it is given (the upstream test knows only its own table).
    """
    cells = 0
    h = 0
    for update in updates:
        if table_id is not None and update.table_id != table_id:
            continue
        for row in update.rows:
            first = row.clustering_raw[0] if row.clustering_raw else None
            if first is None or not first.startswith(b"name"):
                continue
            for cell in row.cells:
                cells += 1
                h = upstream_value_hash(h, cell.raw)
    return cells, h

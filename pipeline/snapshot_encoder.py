"""The bootstrap's raw events straight from the bytes Cassandra returns: what ``pipeline.snapshot_events``
builds, byte for byte, without decoding a value.

``snapshot_events`` is the specification: rows as the driver decodes them, serialized again into cells,
a ``PartitionUpdate`` per event, its canonical digest (``cassandra_model.digest``) and the Avro record
(``schemas.raw_event``). That costs about 85 µs of Python per row of the bench table, and the driver's
decoding 40 more (bench/bootstrap.md). Here the scan keeps each value as the protocol's bytes
(``cassandra_scan.scan_raw_ranges``), which are the cell values as the commit log holds them; a
collection's bytes are cut into its elements' cells; and the digest's canonical bytes and the event's
Avro bytes are written directly, with the byte strings that repeat (column names, a cell's timestamp, the
flags of a cell without TTL) made once. Tests hold the two to identical keys, values and digests
(tests/unit/pipeline/test_snapshot_encoder.py, and against a real Cassandra in
tests/integration/test_pipeline_bootstrap.py).

This module is also the specification of the native encoder (``cdc_native.SnapshotEncoder``, chosen by
``pipeline.snapshot_core``), which the same tests hold to the same bytes.

A raw row is a list: the table's columns in ``TableSchema.all_columns`` order, then the write time and
TTL of each static and regular column (their order in the schema), then the scan time (s), each value the
protocol's bytes or None.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cassandra_model.cql_types import CellLayout
from cassandra_model.digest import digest_head
from cassandra_model.partition_update import NO_DELETION_TIME
from cassandra_model.table_schema import ColumnSchema, TableSchema
from pipeline.errors import PipelineError
from pipeline.snapshot_events import MAX_BYTES_PER_EVENT, MAX_ROWS_PER_EVENT, SnapshotEvent
from schemas.raw_event import RAW_FORMAT, SNAPSHOT_DESCRIPTOR_VERSION, SNAPSHOT_NODE, SNAPSHOT_SEGMENT_ID
from state.snapshot_lists import SNAPSHOT_LIST_PATH_TAIL

if TYPE_CHECKING:
    from pipeline.cassandra_scan import RawPage

_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_QQQ = struct.Struct(">qqq")
_QQ = struct.Struct(">qq")
_NULL = b"\xff\xff\xff\xff"
#: 100-ns intervals between the UUID epoch (1582-10-15) and the Unix epoch
_UUID_EPOCH_OFFSET = 0x01B21DD213814000
_EXPIRING = 0x02
_EMPTY_VALUE = 0x04


def avro_long(value: int) -> bytes:
    """An Avro int or long: zigzag, then 7 bits a byte, low bits first."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def avro_bytes(data: bytes) -> bytes:
    return avro_long(len(data)) + data


def avro_string(text: str) -> bytes:
    return avro_bytes(text.encode())


def _blob(data: bytes | None) -> bytes:
    """The digest's form of a value: u32 length and the bytes, or 0xFFFFFFFF for null."""
    return _NULL if data is None else _U32.pack(len(data)) + data


def _elements(data: bytes, column: str, per: int = 1) -> list[bytes | None]:
    """The items of a serialized list or set (int32 count, then int32-sized items; -1 is null), or with
    ``per`` 2 the keys and values of a map, alternating."""
    try:
        (count,) = _I32.unpack_from(data, 0)
        out: list[bytes | None] = []
        pos = 4
        for _ in range(count * per):
            (size,) = _I32.unpack_from(data, pos)
            pos += 4
            if size < 0:
                out.append(None)
            else:
                out.append(data[pos : pos + size])
                pos += size
    except struct.error as exc:
        raise PipelineError(
            f"bootstrap: the value of column {column} is not a serialized collection"
        ) from exc
    return out


def _stamps(data: bytes, column: str) -> list[bytes | None]:
    """The write times of ``WRITETIME(<collection or UDT>)``: a list of bigints (-1 length: none). Each
    present one takes 12 bytes, so a list without nulls is cut without reading its lengths."""
    (count,) = _I32.unpack_from(data, 0)
    if len(data) == 4 + 12 * count:
        return [data[8 + 12 * i : 16 + 12 * i] for i in range(count)]
    return _elements(data, column)


def _fields(data: bytes, count: int) -> list[bytes | None]:
    """The fields of a serialized UDT (int32-sized, -1 null); fields the bytes end before are null."""
    out: list[bytes | None] = []
    pos = 0
    end = len(data)
    for _ in range(count):
        if pos >= end:
            out.append(None)
            continue
        (size,) = _I32.unpack_from(data, pos)
        pos += 4
        if size < 0:
            out.append(None)
        else:
            out.append(data[pos : pos + size])
            pos += size
    return out


def _list_path(base_us: int, index: int) -> bytes:
    """``snapshot_events.list_path``: a version-1 timeuuid per list position after ``base_us``."""
    ticks = base_us * 10 + _UUID_EPOCH_OFFSET + index
    time_hi = ((ticks >> 48) & 0x0FFF) | 0x1000
    return (
        (ticks & 0xFFFFFFFF).to_bytes(4, "big")
        + ((ticks >> 32) & 0xFFFF).to_bytes(2, "big")
        + time_hi.to_bytes(2, "big")
        + SNAPSHOT_LIST_PATH_TAIL
    )


#: the Avro varint of every length under 128 (the length of most values and paths)
_SMALL = [bytes((2 * n,)) for n in range(64)] + [
    bytes((2 * n & 0x7F | 0x80, 2 * n >> 7)) for n in range(64, 128)
]


def _avro_sized(data: bytes) -> bytes:
    size = len(data)
    return (_SMALL[size] if size < 128 else avro_long(size)) + data


@dataclass(slots=True, frozen=True)
class _Column:
    """How one static or regular column's raw values become cells, with the byte strings that repeat."""

    name: str
    layout: CellLayout
    value_at: int
    time_at: int
    ttl_at: int
    fields: int
    """A UDT's field count (the write times list one per field)."""
    name_bytes: bytes
    """What the digest orders a row's cells by (then by path)."""
    avro_name: bytes
    digest_name: bytes
    avro_unpathed: bytes
    """The Avro of the column name and a null path: how a single-cell column's cells start."""
    digest_unpathed: bytes


class _Row:
    """One row's cells in both forms, with what its liveness and the event's size need."""

    __slots__ = ("avro", "cells", "digest", "expiring", "expiry", "oldest", "size", "ttl")

    def __init__(self) -> None:
        self.avro: list[bytes] = []
        self.digest: list[tuple[bytes, bytes]] = []  # (column name, the column's cells) to sort by name
        self.cells = 0
        self.oldest: int | None = None
        self.expiring = True
        self.expiry = -1
        self.ttl = 0
        self.size = 0


class SnapshotEncoder:
    """Raw rows of one table (one Spark task's share) into the raw events ``snapshot_events`` would make."""

    def __init__(
        self,
        schema: TableSchema,
        *,
        cluster: str,
        published_at_ms: int,
        max_rows: int = MAX_ROWS_PER_EVENT,
        max_bytes: int = MAX_BYTES_PER_EVENT,
    ) -> None:
        self.schema = schema
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        columns = schema.all_columns()
        position = {c.name: i for i, c in enumerate(columns)}
        timed = [*schema.static_columns.values(), *schema.regular_columns.values()]
        after = len(columns)

        def plan(column: ColumnSchema, n: int) -> _Column:
            t = column.type
            layout = t.cell_layout
            name = column.name.encode()
            return _Column(
                column.name,
                layout,
                position[column.name],
                after + 2 * n,
                after + 2 * n + 1,
                len(t.field_types) if layout is CellLayout.FIELDS else 0,  # type: ignore[attr-defined]
                name,
                _avro_sized(name),
                _blob(name),
                _avro_sized(name) + b"\x00",
                _blob(name) + _NULL,
            )

        plans = [plan(c, n) for n, c in enumerate(timed)]
        self.static = plans[: len(schema.static_columns)]
        self.regular = plans[len(schema.static_columns) :]
        self.scan_time_at = after + 2 * len(timed)
        self.key_at = [position[c.name] for c in schema.partition_key]
        self.clustering_at = [position[c.name] for c in schema.clustering]
        source = (
            avro_string(cluster)
            + avro_string(SNAPSHOT_NODE)
            + avro_long(SNAPSHOT_SEGMENT_ID)
            + avro_long(SNAPSHOT_DESCRIPTOR_VERSION)
            + avro_long(0)  # entry_offset
            + avro_long(0)  # position
            + avro_long(published_at_ms)
        )
        self.head = (
            avro_long(RAW_FORMAT)
            + source
            + avro_string(schema.keyspace)
            + avro_string(schema.table)
            + avro_string(str(schema.table_id))
        )
        self.key_head = avro_string(schema.keyspace) + avro_string(schema.table)
        self.digest_head = hashlib.md5(digest_head(schema.table_id))
        # a cell without TTL: ttl 0, no deletion time, flags 0 (or empty value); the digest's state 0
        self.avro_lasting = (avro_long(0) + avro_long(NO_DELETION_TIME) + avro_long(0),
                             avro_long(0) + avro_long(NO_DELETION_TIME) + avro_long(_EMPTY_VALUE))  # fmt: skip
        self.digest_lasting = _QQ.pack(0, NO_DELETION_TIME)
        self.stamps: dict[bytes, tuple[int, bytes]] = {}
        """A write time's 8 bytes -> (the time, its Avro long): the cells of one write share it."""

    # -- values

    def _stamp(self, raw: bytes) -> tuple[int, bytes]:
        found = self.stamps.get(raw)
        if found is None:
            if len(self.stamps) > 100_000:
                self.stamps.clear()
            value = _I64.unpack(raw)[0]
            found = self.stamps[raw] = (value, avro_long(value))
        return found

    def partition_key(self, row: list[Any]) -> bytes:
        parts = [row[i] for i in self.key_at]
        if len(parts) == 1:
            return parts[0]  # type: ignore[no-any-return]
        return b"".join(len(p).to_bytes(2, "big") + p + b"\x00" for p in parts)

    def _fail(self, column: _Column, why: str) -> PipelineError:
        return PipelineError(f"bootstrap of {self.schema.name}, column {column.name}: {why}")

    def _row(self, columns: list[_Column], row: list[Any], scan_time: int) -> _Row:
        """The live cells of the given columns of a raw row, in both forms (module notes). A cell without
        TTL of a single-cell column, the commonest, is written here; the others by ``_single`` and
        ``_multi``."""
        out = _Row()
        stamps = self.stamps
        lasting = self.avro_lasting
        digest_lasting = self.digest_lasting
        avro = out.avro
        digest = out.digest
        for column in columns:
            value = row[column.value_at]
            if value is None:
                continue
            time = row[column.time_at]
            if column.layout is not CellLayout.SINGLE:
                self._multi(out, column, value, time, row[column.ttl_at], scan_time)
                continue
            if row[column.ttl_at] is not None:
                self._single(out, column, value, time, row[column.ttl_at], scan_time)
                continue
            found = stamps.get(time)
            if found is None:
                found = self._stamp(time)
            stamp = found[0]
            if out.oldest is None or stamp < out.oldest:
                out.oldest = stamp
            out.cells += 1
            size = len(value)
            out.size += size
            out.expiring = False
            avro.append(
                column.avro_unpathed + found[1] + lasting[not value]
                + (_SMALL[size] if size < 128 else avro_long(size)) + value
            )  # fmt: skip
            digest.append(
                (column.name_bytes, column.digest_unpathed + b"\x00" + time + digest_lasting
                 + _U32.pack(size) + value)
            )  # fmt: skip
        return out

    def _single(
        self, out: _Row, column: _Column, value: bytes, time: bytes, ttl: bytes | None, scan_time: int
    ) -> None:
        stamp, stamp_avro = self._stamp(time)
        if out.oldest is None or stamp < out.oldest:
            out.oldest = stamp
        out.cells += 1
        out.size += len(value)
        remaining = 0 if ttl is None else _I32.unpack(ttl)[0]
        if not remaining:
            out.expiring = False
            empty = not value
            out.avro.append(column.avro_unpathed + stamp_avro + self.avro_lasting[empty] + _avro_sized(value))
            out.digest.append(
                (
                    column.name_bytes,
                    column.digest_unpathed + b"\x00" + time + self.digest_lasting + _blob(value),
                )
            )
            return
        remaining = max(remaining, 1)
        deletion = scan_time + remaining
        flags = (_EXPIRING | _EMPTY_VALUE) if not value else _EXPIRING
        if deletion > out.expiry:
            out.expiry, out.ttl = deletion, remaining
        out.avro.append(
            column.avro_unpathed + stamp_avro + avro_long(remaining) + avro_long(deletion)
            + avro_long(flags) + _avro_sized(value)
        )  # fmt: skip
        out.digest.append(
            (column.name_bytes,
             column.digest_unpathed + b"\x02" + _QQQ.pack(stamp, remaining, deletion) + _blob(value))
        )  # fmt: skip

    def _multi(
        self,
        out: _Row,
        column: _Column,
        value: bytes,
        times: bytes | None,
        ttls: bytes | None,
        scan_time: int,
    ) -> None:
        """The cells of a non-frozen collection or UDT: one per element (field), each with its own write
        time and TTL from the per-element lists Cassandra 5.0 returns."""
        if times is None:
            raise self._fail(
                column, "WRITETIME gave null, not one write time per element (needs Cassandra 5.0)"
            )
        (count,) = _I32.unpack_from(times, 0)
        head = times[:4]
        if ttls is not None and ttls == head + _NULL * count:
            ttls = None  # Cassandra lists a null TTL for each element that has none
        if (
            ttls is None
            and count
            and column.layout is not CellLayout.FIELDS
            and times == head + times[4:16] * count
        ):
            self._one_write(out, column, value, times[8:16], count)
            return
        stamps = _stamps(times, column.name)
        remaining = _elements(ttls, column.name) if ttls is not None else None
        if remaining is not None and len(remaining) != count:
            raise self._fail(column, f"TTL gave {len(remaining)} entries for {count} write times")
        layout = column.layout
        if layout is CellLayout.FIELDS:
            fields = _fields(value, column.fields)
            if count != len(fields):
                raise self._fail(column, f"WRITETIME gave {count} entries for the {len(fields)} fields")
            keep = [i for i in range(count) if stamps[i] is not None and fields[i] is not None]
            paths: list[bytes] = [i.to_bytes(2, "big") for i in keep]
            items: list[bytes] = [fields[i] for i in keep]  # type: ignore[misc]
            stamps = [stamps[i] for i in keep]
            if remaining is not None:
                remaining = [remaining[i] for i in keep]
            if not keep:
                return
        elif layout is CellLayout.MAP:
            pairs = _elements(value, column.name, 2)
            if len(pairs) != 2 * count:
                raise self._fail(column, f"WRITETIME gave {count} entries for {len(pairs) // 2} elements")
            paths = pairs[0::2]  # type: ignore[assignment]
            items = [v or b"" for v in pairs[1::2]]
        else:
            elements = _elements(value, column.name)
            if len(elements) != count:
                raise self._fail(column, f"WRITETIME gave {count} entries for {len(elements)} elements")
            if None in stamps:
                raise self._fail(column, f"WRITETIME gave a null for one of {count} elements")
            if layout is CellLayout.SET:
                paths = elements  # type: ignore[assignment]
                items = [b""] * count
            else:  # a list: generated timeuuid paths after its oldest element's write time (module notes)
                base = min(_I64.unpack(t)[0] for t in stamps)  # type: ignore[arg-type]
                paths = [_list_path(base, i) for i in range(count)]
                items = [item or b"" for item in elements]
        if not count:
            return
        name = column.avro_name + b"\x02"
        lasting = self.avro_lasting
        digest_lasting = self.digest_lasting
        stamp_of = self._stamp
        avro = []
        digest = []
        oldest = out.oldest
        size = 0
        for n, path in enumerate(paths):
            time = stamps[n]
            item = items[n]
            stamp, stamp_avro = stamp_of(time)  # type: ignore[arg-type]
            if oldest is None or stamp < oldest:
                oldest = stamp
            size += len(item) + len(path)
            left = 0 if remaining is None or remaining[n] is None else _I32.unpack(remaining[n])[0]  # type: ignore[arg-type]
            sized_path = _blob(path)
            if not left:
                avro.append(name + _avro_sized(path) + stamp_avro + lasting[not item] + _avro_sized(item))
                digest.append((path, sized_path + b"\x00" + time + digest_lasting + _blob(item)))  # type: ignore[operator]
                out.expiring = False
                continue
            left = max(left, 1)
            deletion = scan_time + left
            flags = _EXPIRING if item else (_EXPIRING | _EMPTY_VALUE)
            if deletion > out.expiry:
                out.expiry, out.ttl = deletion, left
            avro.append(
                name + _avro_sized(path) + stamp_avro + avro_long(left) + avro_long(deletion)
                + avro_long(flags) + _avro_sized(item)
            )  # fmt: skip
            digest.append((path, sized_path + b"\x02" + _QQQ.pack(stamp, left, deletion) + _blob(item)))
        out.oldest = oldest
        out.size += size
        out.cells += len(paths)
        out.avro.append(b"".join(avro))
        if len(digest) > 1:
            digest.sort(key=_first)
        prefix = column.digest_name
        out.digest.append((column.name_bytes, b"".join([prefix + cell for _, cell in digest])))

    def _one_write(self, out: _Row, column: _Column, value: bytes, time: bytes, count: int) -> None:
        """``_multi``'s cells of a collection one write made (every element has its write time, no TTL):
        the same bytes, with what the cells share written once. Found on the raw WRITETIME list alone."""
        found = self.stamps.get(time) or self._stamp(time)
        stamp = found[0]
        if out.oldest is None or stamp < out.oldest:
            out.oldest = stamp
        out.expiring = False
        name = column.avro_name + b"\x02"
        digest_name = column.digest_name
        layout = column.layout
        items = _elements(value, column.name, 2 if layout is CellLayout.MAP else 1)
        if len(items) != (2 * count if layout is CellLayout.MAP else count):
            raise self._fail(column, f"WRITETIME gave {count} entries for {len(items)} items")
        out.cells += count
        if layout is CellLayout.SET:
            tail = found[1] + self.avro_lasting[True] + b"\x00"
            out.avro.append(name + (tail + name).join([_avro_sized(p) for p in items]) + tail)  # type: ignore[arg-type]
            ordered = sorted(items) if count > 1 else items  # type: ignore[type-var]
            after = b"\x00" + time + self.digest_lasting + b"\x00\x00\x00\x00"
            out.digest.append(
                (
                    column.name_bytes,
                    digest_name + (after + digest_name).join([_blob(p) for p in ordered]) + after,
                )
            )
            out.size += sum(map(len, items))  # type: ignore[arg-type]
            return
        if layout is CellLayout.MAP:
            paths, values = items[0::2], items[1::2]
        else:  # a list: generated timeuuid paths after the write time (module notes)
            paths, values = [_list_path(stamp, i) for i in range(count)], items
        lasting = self.avro_lasting
        between = found[1]
        out.avro.append(
            b"".join([name + _avro_sized(p) + between + lasting[not v] + _avro_sized(v or b"")  # type: ignore[arg-type]
                      for p, v in zip(paths, values, strict=True)])
        )  # fmt: skip
        between = b"\x00" + time + self.digest_lasting
        cells = sorted(zip(paths, values, strict=True)) if count > 1 else zip(paths, values, strict=True)
        out.digest.append(
            (
                column.name_bytes,
                b"".join([digest_name + _blob(p) + between + _blob(v or b"") for p, v in cells]),
            )  # type: ignore[arg-type]
        )
        out.size += sum(map(len, paths)) + sum(len(v or b"") for v in values)  # type: ignore[arg-type]

    # -- events

    def events(self, rows: Iterable[list[Any]]) -> Iterator[tuple[bytes, list[SnapshotEvent]]]:
        """Per partition (its rows consecutive, as the scan gives them): its key and its events."""
        pending: list[list[Any]] = []
        key: bytes | None = None
        for row in rows:
            row_key = self.partition_key(row)
            if row_key != key:
                if pending:
                    yield key, self.partition_events(key, pending)  # type: ignore[arg-type]
                pending = []
                key = row_key
            pending.append(row)
        if pending:
            yield key, self.partition_events(key, pending)  # type: ignore[arg-type]

    def events_of_pages(self, pages: Iterable[RawPage]) -> Iterator[tuple[bytes, list[SnapshotEvent]]]:
        """``events`` of the pages' rows (``RawPage.rows``: the page cut, the scan time appended)."""
        return self.events(row for page in pages for row in page.rows())

    def partition_events(self, key: bytes, rows: list[list[Any]]) -> list[SnapshotEvent]:
        scan_time = rows[0][self.scan_time_at]
        static = self._row(self.static, rows[0], scan_time) if self.static else None
        clustering_at = self.clustering_at
        built = []
        for row in rows:
            clustering = [row[i] for i in clustering_at]
            if clustering and all(c is None for c in clustering):
                continue  # a partition with static cells and no row reads as one row of null clusterings
            built.append((clustering, self._row(self.regular, row, scan_time)))
        stamps = [r.oldest for _, r in built if r.oldest is not None]
        if static is not None and static.oldest is not None:
            stamps.append(static.oldest)
        fallback = min(stamps, default=0)
        events = []
        static_part = static if static is not None and static.cells else None
        pending: list[tuple[list[Any], _Row]] = []
        size = static.size if static is not None else 0
        for clustering, cells in built:
            if pending and (len(pending) >= self.max_rows or size + cells.size > self.max_bytes):
                events.append(self._event(key, static_part, pending, fallback))
                static_part, pending, size = None, [], 0
            pending.append((clustering, cells))
            size += cells.size
        if pending or static_part is not None:
            events.append(self._event(key, static_part, pending, fallback))
        return events

    def _event(
        self, key: bytes, static: _Row | None, rows: list[tuple[list[Any], _Row]], fallback: int
    ) -> SnapshotEvent:
        canonical = [_blob(key), b"-"]  # the partition key, no partition deletion
        avro: list[bytes] = []
        cells = 0
        if static is None:
            canonical.append(b"-")
            avro.append(b"\x00")
        else:
            canonical.append(b"S")
            avro.append(b"\x02")
            self._encode_row(canonical, avro, [], static, None)
            cells += static.cells
        canonical.append(_U32.pack(len(rows)))
        if rows:
            avro.append(avro_long(len(rows)))
            for clustering, row in rows:
                self._encode_row(canonical, avro, clustering, row, fallback)
                cells += row.cells
        avro.append(b"\x00")  # end of the rows (or no rows)
        canonical.append(b"\x00\x00\x00\x00")  # no range tombstones
        digest = self.digest_head.copy()
        digest.update(b"".join(canonical))
        md5 = digest.digest()
        value = b"".join(
            (self.head, _avro_sized(key), md5, b"\x00\x00", *avro, b"\x00")  # not a counter, no deletion
        )
        return SnapshotEvent(self.key_head + _avro_sized(key), value, md5, len(rows), cells)

    def _encode_row(
        self,
        canonical: list[bytes],
        avro: list[bytes],
        clustering: list[Any],
        row: _Row,
        fallback: int | None,
    ) -> None:
        """One row into both forms. ``fallback`` None: the static row (no liveness)."""
        canonical.append(_U32.pack(len(clustering)))
        if clustering:
            avro.append(_SMALL[len(clustering)] if len(clustering) < 128 else avro_long(len(clustering)))
            for value in clustering:
                canonical.append(_blob(value))
                avro.append(b"\x00" if value is None else b"\x02" + _avro_sized(value))
        avro.append(b"\x00")
        if fallback is None:
            canonical.append(b"-")
            avro.append(b"\x00")
        else:
            if row.oldest is None:
                timestamp, ttl, expiry = fallback, 0, None
            elif row.expiring:
                timestamp, ttl, expiry = row.oldest, row.ttl, row.expiry
            else:
                timestamp, ttl, expiry = row.oldest, 0, None
            canonical.append(b"L" + _QQQ.pack(timestamp, ttl, -1 if expiry is None else expiry))
            avro.append(b"\x02" + avro_long(timestamp) + avro_long(ttl))
            avro.append(b"\x00" if expiry is None else b"\x02" + avro_long(expiry))
        canonical.append(b"-\x00\x00\x00\x00")  # no row deletion, no complex deletions
        avro.append(b"\x00\x00")
        canonical.append(_U32.pack(row.cells))
        if row.cells:
            if len(row.digest) > 1:
                row.digest.sort(key=_first)
            canonical.extend(cells for _, cells in row.digest)
            avro.append(avro_long(row.cells))
            avro.extend(row.avro)
        avro.append(b"\x00")


def _first(item: tuple[bytes, bytes]) -> bytes:
    return item[0]

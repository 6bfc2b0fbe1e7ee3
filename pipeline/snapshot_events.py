"""Rows read from Cassandra (``pipeline.cassandra_scan`` with write times) as raw events: the bootstrap's
way into the workers' state. No Spark and no I/O here.

Each pre-existing partition becomes one raw event (or several, ``max_rows``/``max_bytes`` per event, so a
wide partition never makes a Kafka record above the broker's limit) of exactly the shape the agents
publish (``schemas.raw_event.raw_event_record``), with ``source.node = SNAPSHOT_NODE``. Every cell
carries its real write time; the workers merge it with last-write-wins like any write, so a live write
newer than the snapshot wins whatever the order of arrival. The digest is the agents' canonical MD5 of
the update's content, so a second bootstrap of unchanged data repeats the digests and the workers drop it.

What CQL cannot show, and the choices made:

* TTL: Cassandra returns the remaining seconds; the cell gets ``ttl`` = remaining and expires at
  ``_scan_time_s + remaining``. The scan time is taken before the query, so the expiry is never later
  than Cassandra's, at most the query's duration earlier; an agent's copy of the same write (same
  timestamp, the real expiry) wins the tie. Digests of TTL'd cells can differ between two runs; merging
  the repeat changes no visible value, so it emits nothing.
* Row liveness (the INSERT marker) is invisible. Every row gets one, at the smallest write time of its
  live regular cells: the statement that created the row wrote its cells at that time. It expires only
  when every cell of the row expires (then at the last cell's expiry), as an ``INSERT ... USING TTL``
  would. A row without live regular cells exists in a SELECT only through its marker; its timestamp is
  the smallest write time of the partition (static cells, other rows), else 0: lower rather than
  higher, so that a delete racing the snapshot still wins. Consequence: a row created by UPDATE (no
  marker in Cassandra) stays in the images when all its cells are later set to null, where Cassandra
  drops it; a marker TTL of a row without cells is not known.
* Lists: the cells' timeuuid paths cannot be read through CQL. The paths are generated, deterministic
  and in list order: the time of the list's oldest element write plus the position (100 ns units), so a
  later append (a newer timeuuid) sorts after them. Statements that address a pre-existing element by
  its real path (``SET l[i] = ...``, ``DELETE l[i]``, ``l = l - [...]``) cannot match these paths; the
  images then show the list differently from Cassandra until the whole list is overwritten.
* Set elements and map keys are the cell paths (serialized); UDT fields the 2-byte field index;
  element write times come per element from ``WRITETIME(<collection>)`` (Cassandra 5.0: one entry per
  element in cell order; for a UDT one entry per field of the type, null for a field without a cell).
* Static columns are taken once per partition, from its first row.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from cassandra_model.cql_types import CellLayout, CqlType
from cassandra_model.digest import update_digest
from cassandra_model.partition_update import NO_DELETION_TIME, Cell, PartitionUpdate, Row
from cassandra_model.table_schema import ColumnSchema, TableSchema
from cassandra_model.value_serializer import native_bytes, serialize
from pipeline.cassandra_scan import SCAN_TIME_KEY, ttl_key, write_time_key
from pipeline.errors import PipelineError
from schemas.raw_event import (
    SNAPSHOT_DESCRIPTOR_VERSION,
    SNAPSHOT_NODE,
    SNAPSHOT_SEGMENT_ID,
    encode_raw_event,
    encode_raw_key,
    raw_event_record,
)
from state.snapshot_lists import SNAPSHOT_LIST_PATH_TAIL

#: commit-log cell flags (as raw events keep them)
EXPIRING = 0x02
EMPTY_VALUE = 0x04
#: 100-ns intervals between the UUID epoch (1582-10-15) and the Unix epoch
UUID_EPOCH_OFFSET = 0x01B21DD213814000
#: rows and value bytes per raw event before a partition is cut into several events
MAX_ROWS_PER_EVENT = 500
MAX_BYTES_PER_EVENT = 512 * 1024


@dataclass(slots=True, frozen=True)
class SnapshotEvent:
    """One encoded raw event (Kafka key and value) and what it holds."""

    key: bytes
    value: bytes
    digest: bytes
    rows: int
    cells: int


def list_path(base_us: int, index: int) -> bytes:
    """A version-1 timeuuid for the ``index``-th element of a list whose oldest element was written at
    ``base_us``: times increase with the position, so the paths sort in list order."""
    ticks = base_us * 10 + UUID_EPOCH_OFFSET + index
    time_low = ticks & 0xFFFFFFFF
    time_mid = (ticks >> 32) & 0xFFFF
    time_hi = ((ticks >> 48) & 0x0FFF) | 0x1000
    head = uuid.UUID(fields=(time_low, time_mid, time_hi, 0x80, 0x00, 0)).bytes[:8]
    return head + SNAPSHOT_LIST_PATH_TAIL


class _Builder:
    """Cells of one table's rows; one per table and task (caches encoders per column)."""

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self.clustering_types = tuple(c.type for c in schema.clustering)

    def fail(self, column: ColumnSchema, why: str) -> PipelineError:
        return PipelineError(f"bootstrap of {self.schema.name}, column {column.name}: {why}")

    def partition_key(self, row: dict[str, Any]) -> bytes:
        parts = [self.value(c, row[c.name]) for c in self.schema.partition_key]
        if len(parts) == 1:
            return parts[0]
        return b"".join(len(p).to_bytes(2, "big") + p + b"\x00" for p in parts)

    def value(self, column: ColumnSchema | Any, value: Any, t: CqlType | None = None) -> bytes:
        t = t or column.type
        try:
            return serialize(t, value)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
            raise self.fail(column, f"cannot serialize {value!r} as {t.cql()}: {exc}") from exc

    def cells(self, column: ColumnSchema, row: dict[str, Any]) -> list[Cell]:
        """The live cells of one static or regular column of a scanned row."""
        value = row[column.name]
        if value is None:
            return []
        times = row[write_time_key(column.name)]
        ttls = row[ttl_key(column.name)]
        scan_time = row[SCAN_TIME_KEY]
        t = column.type
        if not t.multi_cell:
            return [self._cell(column, times, ttls, scan_time, None, self.value(column, value))]
        if not isinstance(times, list):
            raise self.fail(
                column, f"WRITETIME gave {times!r}, not one write time per element (needs Cassandra 5.0)"
            )
        ttls = ttls if isinstance(ttls, list) else [None] * len(times)
        elements = self._elements(column, t, value)
        layout = t.cell_layout
        if len(times) != len(elements) or len(ttls) != len(times):
            what = (
                f"the {len(elements)} fields" if layout is CellLayout.FIELDS else f"{len(elements)} elements"
            )
            raise self.fail(column, f"WRITETIME gave {times!r} for {what}")
        if layout is CellLayout.LIST:
            base = min(times)
            return [
                self._cell(column, ts, tl, scan_time, list_path(base, i), v)
                for i, ((_, v), ts, tl) in enumerate(zip(elements, times, ttls, strict=True))
            ]
        # a UDT has one entry per field of the type: no write time or no value where no cell is live
        return [
            self._cell(column, ts, tl, scan_time, path, v)
            for (path, v), ts, tl in zip(elements, times, ttls, strict=True)
            if ts is not None and v is not None
        ]

    def _elements(
        self, column: ColumnSchema, t: CqlType, value: Any
    ) -> list[tuple[bytes | None, bytes | None]]:
        """(path, value) of each element in Cassandra's cell order (the order WRITETIME lists them)."""
        try:
            return t.element_cells(value, native_bytes)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
            raise self.fail(column, f"cannot serialize {value!r} as {t.cql()}: {exc}") from exc

    @staticmethod
    def _cell(
        column: ColumnSchema, timestamp: int, ttl: int | None, scan_time: int, path: bytes | None, raw: bytes
    ) -> Cell:
        flags = EMPTY_VALUE if not raw else 0
        if ttl:
            remaining = max(int(ttl), 1)
            return Cell(column, flags | EXPIRING, timestamp, remaining, scan_time + remaining, path, raw)
        return Cell(column, flags, timestamp, 0, NO_DELETION_TIME, path, raw)

    def row_cells(self, row: dict[str, Any], columns: Iterable[ColumnSchema]) -> list[Cell]:
        out: list[Cell] = []
        for column in columns:
            out.extend(self.cells(column, row))
        return out

    def clustering(self, row: dict[str, Any]) -> tuple[bytes | None, ...]:
        return tuple(self.value(c, row[c.name]) for c in self.schema.clustering)

    def is_static_only(self, row: dict[str, Any]) -> bool:
        """A partition with static cells and no row reads as one row with null clustering columns."""
        return bool(self.schema.clustering) and all(row[c.name] is None for c in self.schema.clustering)


def _liveness(cells: list[Cell], fallback_us: int) -> tuple[int, int, int | None]:
    """(timestamp, ttl, local expiration time) of a row's guessed marker (module docstring)."""
    if not cells:
        return fallback_us, 0, None
    timestamp = min(c.timestamp for c in cells)
    if all(c.flags & EXPIRING for c in cells):
        last = max(cells, key=lambda c: c.local_deletion_time)
        return timestamp, last.ttl, last.local_deletion_time
    return timestamp, 0, None


def partition_updates(
    schema: TableSchema,
    rows: list[dict[str, Any]],
    *,
    max_rows: int = MAX_ROWS_PER_EVENT,
    max_bytes: int = MAX_BYTES_PER_EVENT,
    builder: _Builder | None = None,
) -> list[PartitionUpdate]:
    """The partition updates that recreate one partition's scanned rows (same partition key, clustering
    order), cut into pieces of at most ``max_rows`` rows / about ``max_bytes`` of values."""
    if not rows:
        return []
    builder = builder or _Builder(schema)
    key = builder.partition_key(rows[0])
    static_cells = builder.row_cells(rows[0], schema.static_columns.values())
    regular = list(schema.regular_columns.values())
    built: list[tuple[tuple[bytes | None, ...], list[Cell]]] = []
    for row in rows:
        if builder.is_static_only(row):
            continue
        built.append((builder.clustering(row), builder.row_cells(row, regular)))
    everything = static_cells + [c for _, cells in built for c in cells]
    fallback = min((c.timestamp for c in everything), default=0)
    static_row = None
    if static_cells:
        static_row = Row((), (), None, 0, None, None, static_cells, is_static=True)
    updates: list[PartitionUpdate] = []
    pending: list[Row] = []
    size = sum(len(c.raw) + len(c.path or b"") for c in static_cells)

    def flush() -> None:
        nonlocal static_row, pending, size
        updates.append(PartitionUpdate(schema, key, None, static_row, pending, []))
        static_row, pending, size = None, [], 0

    for clustering, cells in built:
        timestamp, ttl, expiry = _liveness(cells, fallback)
        row_size = sum(len(c.raw) + len(c.path or b"") for c in cells)
        if pending and (len(pending) >= max_rows or size + row_size > max_bytes):
            flush()
        pending.append(Row(clustering, builder.clustering_types, timestamp, ttl, expiry, None, cells))
        size += row_size
    if pending or static_row is not None:
        flush()
    return updates


def snapshot_event(update: PartitionUpdate, *, cluster: str, published_at_ms: int) -> SnapshotEvent:
    """The encoded raw event of one snapshot partition update (digest over its content only)."""
    digest = update_digest(update)
    record = raw_event_record(
        update,
        cluster=cluster,
        node=SNAPSHOT_NODE,
        segment_id=SNAPSHOT_SEGMENT_ID,
        descriptor_version=SNAPSHOT_DESCRIPTOR_VERSION,
        digest=digest,
        published_at_ms=published_at_ms,
    )
    return SnapshotEvent(
        encode_raw_key(update.keyspace, update.table, update.partition_key),
        encode_raw_event(record),
        digest,
        len(update.rows),
        update.cell_count(),
    )


def table_events(
    schema: TableSchema,
    rows: Iterable[dict[str, Any]],
    *,
    cluster: str,
    published_at_ms: int,
    max_rows: int = MAX_ROWS_PER_EVENT,
    max_bytes: int = MAX_BYTES_PER_EVENT,
) -> Iterator[tuple[bytes, list[SnapshotEvent]]]:
    """Per partition of a scan (rows of a partition consecutive, as ``scan_table`` gives them): its
    partition key and its events."""
    builder = _Builder(schema)
    for key, group in groupby(rows, key=builder.partition_key):
        updates = partition_updates(
            schema, list(group), max_rows=max_rows, max_bytes=max_bytes, builder=builder
        )
        yield key, [snapshot_event(u, cluster=cluster, published_at_ms=published_at_ms) for u in updates]

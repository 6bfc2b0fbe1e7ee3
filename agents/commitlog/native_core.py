"""The native core (the `cdc_native` extension built from `native/`), when it is installed.

The agent's per-event path (framing and CRCs, mutation decoding, the replica-stable digest, the raw
event's Avro bytes, its key and Kafka partition) runs in Rust when `cdc_native` imports, thousands of
entries per call (`NativeSegmentDecoder.batches`). The Python modules stay the specification and the
fallback: the descriptor is parsed here in Python, compressed sections are decompressed by
`compression.decompress`, and any entry the native decoder does not publish by itself (system_schema, a
table or column the catalog lacks, bytes that do not decode) is decoded by the Python decoder with the
same accounting as before. Without the extension (`pip install .` with no Rust toolchain) `CORE` is
"python" and everything runs on the Python decoder.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from agents.commitlog.compression import decompress
from agents.commitlog.errors import CorruptEntryError, CorruptSectionError
from agents.commitlog.log_reader import SchemaMissHook, SegmentDecoder
from agents.commitlog.segment_reader import (
    Damage,
    DamageScope,
    LogEntry,
    SegmentReadResult,
    SegmentScan,
    Source,
    StopReason,
)
from cassandra_model.partition_update import PartitionUpdate
from cassandra_model.table_schema import SchemaCatalog, TableSchema

try:  # built from native/ by `make setup`; absent after a plain `pip install .`
    import cdc_native
except ImportError:  # pragma: no cover - depends on the installation
    cdc_native = None

#: "native" when the extension is installed, else "python"
AVAILABLE = "native" if cdc_native is not None else "python"
#: most raw events one native call returns (a batch is published as a whole)
BATCH_EVENTS = 2000


class TableMode(IntEnum):
    """What the native decoder does with a table's updates."""

    PUBLISH = 0  # encode as raw events
    SKIP = 1  # decode (the entry must be valid), publish nothing
    PYTHON = 2  # hand every entry touching the table to the Python decoder


class NativeCoreError(RuntimeError):
    """The native core was asked for and is not installed."""


@dataclass(slots=True)
class EventBatch:
    """Raw events ready to send, in log order: keys, values, each one's entry end and Kafka partition."""

    keys: list[bytes]
    values: list[bytes]
    ends: list[int]
    partitions: list[int]
    skipped: int  # updates of tables not captured
    first_write_time: int | None
    last_write_time: int | None


def _column_spec(table: TableSchema, name: str) -> tuple[str, bool, int, int | None]:
    column = table.header_column(name)
    assert column is not None  # only names the table knows are listed
    complex_ = column.type.multi_cell
    fixed = column.type.fixed_length
    return name, complex_, -1 if fixed is None or complex_ else fixed, table.dropped_time(name)


def table_spec(table: TableSchema, mode: TableMode) -> tuple[Any, ...]:
    """What the native decoder needs of a table: the column header's resolution of every name."""
    names = dict.fromkeys([*table.regular_columns, *table.static_columns, *table.dropped_columns])
    clustering = [-1 if c.type.fixed_length is None else c.type.fixed_length for c in table.clustering]
    return (table.table_id.bytes, str(table.table_id), table.keyspace, table.table, table.is_counter,
            int(mode), clustering, [_column_spec(table, name) for name in names])  # fmt: skip


class NativeCatalog:
    """The native twin of a SchemaCatalog, rebuilt whenever the catalog's tables change (a reload).

    system_schema's tables are always decoded in Python: their updates are schema changes the decoder
    reports (and the agent acts on at once).
    """

    def __init__(self, catalog: SchemaCatalog, mode: Callable[[TableSchema], TableMode]) -> None:
        if cdc_native is None:
            raise NativeCoreError("the native core (cdc_native) is not installed")
        self.catalog = catalog
        self.mode = mode
        self._tables: list[TableSchema] = []
        self._native: Any = None

    def _mode(self, table: TableSchema) -> TableMode:
        return TableMode.PYTHON if table.keyspace == "system_schema" else self.mode(table)

    def current(self) -> Any:
        tables = self.catalog.tables()
        if (
            self._native is None
            or len(tables) != len(self._tables)
            or any(a is not b for a, b in zip(tables, self._tables, strict=True))
        ):
            self._native = cdc_native.Catalog([table_spec(t, self._mode(t)) for t in tables])
            self._tables = tables
        return self._native


def _inflater(codec: Any, segment: str) -> Callable[[bytes, int, int], bytes] | None:
    """The compressed sections' decompression, handed off to compression.decompress (once per section)."""
    if codec is None:
        return None

    def inflate(data: bytes, length: int, offset: int) -> bytes:
        return decompress(codec, data, length, segment=segment, offset=offset)

    return inflate


def _damage(segment: str, found: tuple[Any, ...]) -> Damage:
    offset, position, scope, entry_error, message = found
    kind = CorruptEntryError if entry_error else CorruptSectionError
    return Damage(
        segment, offset, position, DamageScope(scope), kind(message, segment=segment, offset=offset)
    )


def _path_or_bytes(source: Source) -> tuple[str | None, bytes | None]:
    if isinstance(source, bytes | bytearray | memoryview):
        return None, bytes(source)
    return os.fspath(source), None


def native_read_segment(
    source: Source,
    *,
    start: int = 0,
    limit: int | None = None,
    completed: bool = False,
    strict: bool = False,
    name: str | None = None,
) -> SegmentReadResult:
    """segment_reader.read_segment on the native framing (the descriptor is read by the Python reader):
    the same entries, damage, resume position and stop, or the same error."""
    if cdc_native is None:
        raise NativeCoreError("the native core (cdc_native) is not installed")
    with SegmentScan(source, start=start, limit=limit, completed=completed, strict=strict, name=name) as scan:
        descriptor, segment = scan.descriptor, scan.segment
    codec = descriptor.compression if descriptor is not None else None
    path, data = _path_or_bytes(source)
    entries, damage, resume, stop, failure = cdc_native.scan_segment(
        segment, path, data, start, limit, completed, strict,
        descriptor.header_end if descriptor is not None else None,
        descriptor.segment_id if descriptor is not None else 0,
        codec is not None, _inflater(codec, segment), CorruptSectionError,
    )  # fmt: skip
    if failure is not None:
        raise _damage(segment, failure).error
    segment_id = descriptor.segment_id if descriptor is not None else 0
    return SegmentReadResult(
        segment=segment,
        descriptor=descriptor,
        entries=[LogEntry(segment_id, position, end, body) for position, end, body in entries],
        damage=[_damage(segment, d) for d in damage],
        resume_position=resume,
        stop=StopReason(stop),
        completed=completed,
    )


def publish_all(table: TableSchema) -> TableMode:
    """Every table's updates become events (benchmarks, tests)."""
    return TableMode.PUBLISH


class NativeSegmentDecoder(SegmentDecoder):
    """A SegmentDecoder whose entries are read, decoded and encoded by the native core.

    The descriptor is read and checked by the Python reader (same errors); `batches()` yields EventBatch
    objects for what the native core published and, for each entry it handed back, that entry's updates
    as the Python decoder returns them. `resume_position`, `damage`, `stop`, `finished` and `stats` mean
    what they mean for SegmentDecoder.
    """

    def __init__(
        self,
        source: Source,
        catalog: SchemaCatalog,
        native_catalog: NativeCatalog,
        *,
        cluster: str,
        node: str,
        start: int = 0,
        limit: int | None = None,
        completed: bool = False,
        name: str | None = None,
        on_schema_miss: SchemaMissHook | None = None,
    ) -> None:
        super().__init__(
            source,
            catalog,
            start=start,
            limit=limit,
            completed=completed,
            name=name,
            on_schema_miss=on_schema_miss,
        )
        self._scan.close()  # it read the descriptor; the native reader reads the sections
        self.native_catalog = native_catalog
        descriptor = self.descriptor
        codec = descriptor.compression if descriptor is not None else None
        path, data = _path_or_bytes(source)
        self._reader = cdc_native.SegmentBatchReader(
            self.segment,
            path,
            data,
            start,
            limit,
            completed,
            descriptor.header_end if descriptor is not None else None,
            descriptor.segment_id if descriptor is not None else 0,
            codec is not None,
            _inflater(codec, self.segment),
            CorruptSectionError,
            (descriptor.messaging_version or 0) if descriptor is not None else 0,
            descriptor.version if descriptor is not None else 0,
            cluster,
            node,
        )

    @property
    def resume_position(self) -> int:
        if self._stopped_before is not None:
            return self._stopped_before
        return int(self._reader.resume_position)

    @property
    def damage(self) -> list[Damage]:
        return [_damage(self.segment, found) for found in self._reader.damage()]

    @property
    def stop(self) -> StopReason | None:
        stop = self._reader.stop
        return None if stop is None else StopReason(stop)

    @property
    def finished(self) -> bool:
        return self._stopped_before is None and bool(self._reader.finished)

    def __iter__(self) -> Iterator[PartitionUpdate]:
        raise TypeError("read a NativeSegmentDecoder with batches()")

    def batches(
        self,
        *,
        max_events: int = BATCH_EVENTS,
        partitions: list[int] | None = None,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> Iterator[EventBatch | list[PartitionUpdate]]:
        """EventBatch for what the native core published; a list of updates for each entry it handed back
        (decoded by the Python decoder, with the schema-miss hook). `partitions`: the raw topic's
        partition ids, as the producer lists them (the default partitioner picks by murmur2 of the key)."""
        count = len(partitions) if partitions else 0
        direct = partitions is None or partitions == list(range(count))
        while True:
            batch = self._reader.next_batch(self.native_catalog.current(), max_events, clock_ms(), count)
            (keys, values, ends, parts, entries, updates, skipped, first, last, pending, done, last_end) = (
                batch
            )
            self.stats.entries += entries
            self.stats.updates += updates
            if last_end is not None:
                self._last_end = last_end
            if entries:
                if not direct:
                    assert partitions is not None
                    parts = [partitions[p] for p in parts]
                yield EventBatch(keys, values, ends, parts, skipped, first, last)
            if pending is not None:
                position, end, data = pending
                decoded = self.decode_entry(data, position, end)
                if decoded is None:
                    return
                yield decoded
                self._last_end = end
            elif done:
                return

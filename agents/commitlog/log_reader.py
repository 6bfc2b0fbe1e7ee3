"""Segment bytes to partition updates: framing and mutation decoding joined, with the accounting.

The one entry point the agent, `cdc segment dump`, tests and benchmarks share. It stays pure (no network):
schema changes found in the log are reported for the caller to act on (reload the catalog), unknown
tables are counted, damaged or undecodable entries are reported with segment and offset, and reading
always goes on with the next entry.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import TracebackType

from agents.commitlog.descriptor import SegmentDescriptor
from agents.commitlog.errors import (
    DECODE_ERRORS,
    MutationDecodeError,
    UnknownColumnError,
    UnsupportedSegmentError,
)
from agents.commitlog.mutation_decoder import decode_mutation
from agents.commitlog.segment_reader import Damage, SegmentScan, Source, StopReason
from cassandra_model.errors import UnknownTableError, ValueDecodeError
from cassandra_model.partition_update import PartitionUpdate
from cassandra_model.system_schema import SchemaChange, schema_changes
from cassandra_model.table_schema import SchemaCatalog


class StopBeforeEntry(Exception):
    """Raised by a schema-miss hook to end the read before the current entry (e.g. Cassandra is down).

    The decoder's `resume_position` then points before that entry, so the next read decodes it again.
    """


SchemaMissHook = Callable[[UnknownTableError | UnknownColumnError], bool]


@dataclass(slots=True)
class ReadStats:
    """What one read saw besides the updates it returned."""

    entries: int = 0
    updates: int = 0
    unknown_tables: Counter[uuid.UUID] = field(default_factory=Counter)
    decode_errors: list[MutationDecodeError | ValueDecodeError] = field(default_factory=list)
    schema_changes: list[SchemaChange] = field(default_factory=list)


class SegmentDecoder:
    """Decoded partition updates of one segment read `[start, limit)`, as an iterator.

    `resume_position`, `damage` and `stats` are current while iterating; after the loop `resume_position`
    is where the next read of the same segment starts (never before an update already returned).
    Updates of tables in `catalog` are returned whatever their `cdc` flag; filtering is the caller's.
    """

    def __init__(
        self,
        source: Source,
        catalog: SchemaCatalog,
        *,
        start: int = 0,
        limit: int | None = None,
        completed: bool = False,
        name: str | None = None,
        on_schema_miss: SchemaMissHook | None = None,
    ) -> None:
        """`on_schema_miss` is called for an unknown table or column: True means "the catalog was
        reloaded, decode the entry again"; it may raise StopBeforeEntry to end the read there."""
        self.catalog = catalog
        self.stats = ReadStats()
        self.on_schema_miss = on_schema_miss
        self._last_end = start
        self._stopped_before: int | None = None
        self._scan = SegmentScan(source, start=start, limit=limit, completed=completed, name=name)
        descriptor = self._scan.descriptor
        if descriptor is not None and descriptor.messaging_version is None:
            self._scan.close()
            raise UnsupportedSegmentError(
                f"descriptor version {descriptor.version} (Cassandra 2.x) mutation bodies are not decoded; "
                "only their framing is read",
                segment=self._scan.segment,
                offset=0,
            )

    @property
    def segment(self) -> str:
        return self._scan.segment

    @property
    def descriptor(self) -> SegmentDescriptor | None:
        return self._scan.descriptor

    @property
    def resume_position(self) -> int:
        if self._stopped_before is not None:
            return self._stopped_before
        return self._scan.resume_position

    @property
    def damage(self) -> list[Damage]:
        return self._scan.damage

    @property
    def stop(self) -> StopReason | None:
        return self._scan.stop

    @property
    def finished(self) -> bool:
        return self._stopped_before is None and self._scan.finished

    @property
    def stopped_early(self) -> bool:
        """A schema-miss hook ended the read before an entry it could not decode yet."""
        return self._stopped_before is not None

    def __iter__(self) -> Iterator[PartitionUpdate]:
        for entry in self._scan:
            updates = self.decode_entry(entry.data, entry.position, entry.end)
            if updates is None:
                return
            yield from updates
            self._last_end = entry.end

    def batches(self, **_: object) -> Iterator[list[PartitionUpdate]]:
        """The updates of each entry in turn (what iterating yields, grouped by entry; the agent reads
        both cores through this, see native_core.NativeSegmentDecoder.batches)."""
        for entry in self._scan:
            updates = self.decode_entry(entry.data, entry.position, entry.end)
            if updates is None:
                return
            yield updates
            self._last_end = entry.end

    def decode_entry(self, data: bytes, position: int, end: int) -> list[PartitionUpdate] | None:
        """One entry's updates, with the accounting (stats, schema changes, the schema-miss hook); an
        undecodable entry gives no update. None: the hook ended the read before this entry."""
        self.stats.entries += 1
        version = self.descriptor.messaging_version  # set once the header is readable
        try:
            updates = self._decode(data, version, self.segment, position)
        except StopBeforeEntry:
            self.stats.entries -= 1
            self._stopped_before = self._last_end
            return None
        except UnknownTableError as exc:
            self.stats.unknown_tables[uuid.UUID(str(exc.table_id))] += 1
            updates = []
        except DECODE_ERRORS as exc:
            self.stats.decode_errors.append(exc)
            updates = []
        for update in updates:
            update.position = end
            if update.keyspace == "system_schema":
                self.stats.schema_changes.extend(schema_changes(update))
        self.stats.updates += len(updates)
        return updates

    def _decode(self, data: bytes, version: int, segment: str, offset: int) -> list[PartitionUpdate]:
        try:
            return decode_mutation(
                data, self.catalog, messaging_version=version, segment=segment, offset=offset
            )
        except (UnknownTableError, UnknownColumnError) as exc:
            if self.on_schema_miss is None or not self.on_schema_miss(exc):
                raise
        return decode_mutation(data, self.catalog, messaging_version=version, segment=segment, offset=offset)

    def close(self) -> None:
        self._scan.close()

    def __enter__(self) -> SegmentDecoder:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def decode_segment(
    source: Source | os.PathLike[str],
    catalog: SchemaCatalog,
    *,
    start: int = 0,
    limit: int | None = None,
    completed: bool = False,
    name: str | None = None,
) -> tuple[list[PartitionUpdate], SegmentDecoder]:
    """Read `[start, limit)` whole; the decoder returned carries damage, stats and the resume position."""
    with SegmentDecoder(source, catalog, start=start, limit=limit, completed=completed, name=name) as decoder:
        updates = list(decoder)
    return updates, decoder

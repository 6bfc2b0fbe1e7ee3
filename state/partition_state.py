"""The merged state of one partition, and how one raw event (one partition update) merges into it.

``PartitionState.apply(event, schema)`` is idempotent and commutative: any order of the same raw events,
with any duplicates, ends in an equal state (``==``). Tombstones stay until ``purge`` finds their grace
passed, so a late replica copy of an older write cannot resurrect deleted data; the worker's store purges
with max(gc_grace_seconds, its tombstone floor), since its copies can come later than Cassandra's
gc_grace_seconds allows (``state.store.partition_store.StoreOptions``).

Rows are keyed by the byte-comparable clustering key of ``clustering_order`` (built for this state and
ready to become RocksDB keys: ``sorted_keys()`` is clustering order, and a range deletion covers one key
range). Rows whose clusterings compare equal under their types (decimal ``1.0`` and ``1.00``) are one
row, as in Cassandra, and a row keeps its clustering in the types' canonical form
(``ClusteringKeyOrder.canonical``), whichever spelling each write used: Cassandra shows the bytes its
memtable or sstable kept, which depend on the order of writes, compaction and the replica read, while
the row's Kafka key must not change (a compacted topic and the lake would hold the row twice).

Not carried by raw events, so not merged: shadowable row deletions (deprecated, materialized views).

Everything is in memory here; nothing in this module does I/O.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from cassandra_model.clustering_order import (
    EXCL_END_BOUND,
    EXCL_END_INCL_START_BOUNDARY,
    EXCL_START_BOUND,
    INCL_END_BOUND,
    INCL_END_EXCL_START_BOUNDARY,
    INCL_START_BOUND,
    ClusteringKeyOrder,
)
from cassandra_model.table_schema import TableSchema
from state.cell_merge import Deletion, deletion_from_record
from state.errors import StateError
from state.range_tombstones import RangeTombstoneList
from state.row_state import RowState
from state.table_layout import TableLayout, layout_for

_STARTS = (INCL_START_BOUND, EXCL_START_BOUND)
_ENDS = (INCL_END_BOUND, EXCL_END_BOUND)
_BOUNDARIES = (EXCL_END_INCL_START_BOUNDARY, INCL_END_EXCL_START_BOUNDARY)


@dataclass(slots=True)
class PreparedEvent:
    """A raw event resolved against a layout: clustering keys and range positions computed once."""

    partition_key: bytes
    is_counter: bool
    partition_deletion: Deletion | None
    ranges: list[tuple[bytes, bytes, Deletion]]
    static_row: dict[str, Any] | None
    rows: list[tuple[bytes, tuple[bytes | None, ...], dict[str, Any]]]


@dataclass(slots=True)
class ApplyResult:
    """What an apply changed in the stored state (not necessarily in what is visible), and the timestamps
    of the parts of the update that did: a change event carries the time of the write that made it."""

    rows: set[bytes] = field(default_factory=set)
    static: bool = False
    partition_deletion: bool = False
    range_tombstones: bool = False
    #: per named row, the newest timestamp among its record's parts that were kept
    row_times: dict[bytes, int] = field(default_factory=dict)
    #: the same for the static row
    static_time: int | None = None
    #: the partition deletion's timestamp, when it was kept
    partition_time: int | None = None
    #: the range deletions that were kept: (start, end) positions and timestamp
    range_times: list[tuple[bytes, bytes, int]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.rows) or self.static or self.partition_deletion or self.range_tombstones

    def write_time(self, key: bytes | None, *, static_changed: bool) -> int | None:
        """The time of the write that changed row ``key`` (None: the static-only row): the newest
        timestamp among the kept parts that reach it: its own record's, a partition or range deletion
        covering it, and the static row's when the static columns' values changed (they are part of
        every row's image). The static-only row comes and goes with every row, so every kept part
        reaches it. None when no kept part does (the row changed only in form)."""
        best = self.partition_time
        if key is None:
            times = [*self.row_times.values(), *(t for _, _, t in self.range_times), self.static_time]
        else:
            times = [self.row_times.get(key)]
            times.extend(t for start, end, t in self.range_times if start <= key < end)
            if static_changed:
                times.append(self.static_time)
        for t in times:
            if t is not None and (best is None or t > best):
                best = t
        return best


def range_positions(
    markers: list[dict[str, Any]], order: ClusteringKeyOrder
) -> list[tuple[bytes, bytes, Deletion]]:
    """Pair a partition update's range-tombstone markers (in clustering order) into ranges."""
    out: list[tuple[bytes, bytes, Deletion]] = []
    open_at: bytes | None = None
    open_deletion: Deletion | None = None
    for marker in markers:
        kind = marker["kind"]
        position = order.bound(kind, marker["clustering"])
        if kind in _STARTS:
            if open_at is not None:
                raise StateError("a range tombstone opens while another is open")
            open_at, open_deletion = position, deletion_from_record(marker["deletion"])
            continue
        if open_at is None or open_deletion is None:
            raise StateError(f"a range tombstone marker of kind {kind} closes nothing")
        out.append((open_at, position, open_deletion))
        if kind in _ENDS:
            open_at = open_deletion = None
        elif kind in _BOUNDARIES:
            open_at, open_deletion = position, deletion_from_record(marker["start_deletion"])
            if open_deletion is None:
                raise StateError("a range tombstone boundary without the deletion it opens")
        else:
            raise StateError(f"{kind} is not a range tombstone marker kind")
    if open_at is not None:
        raise StateError("a range tombstone is left open at the end of the partition update")
    return out


def prepare_event(event: dict[str, Any], layout: TableLayout) -> PreparedEvent:
    order = layout.clustering
    rows = []
    for record in event["rows"]:
        clustering = tuple(record["clustering"])
        rows.append((order.key(clustering), order.canonical(clustering), record))  # key() checks first
    markers = event["range_tombstones"]
    return PreparedEvent(
        event["partition_key"],
        bool(event.get("is_counter")),
        deletion_from_record(event["partition_deletion"]),
        range_positions(markers, order) if markers else [],
        event["static_row"],
        rows,
    )


@dataclass(slots=True)
class PartitionState:
    """One partition: its deletion, static row, rows by clustering key, and range deletions."""

    partition_key: bytes
    partition_deletion: Deletion | None = None
    static_row: RowState | None = None
    rows: dict[bytes, RowState] = field(default_factory=dict)
    range_tombstones: RangeTombstoneList = field(default_factory=RangeTombstoneList)
    _sorted: list[bytes] | None = field(default=None, compare=False, repr=False)

    # -- reading

    def sorted_keys(self) -> list[bytes]:
        """Row keys in clustering order."""
        if self._sorted is None:
            self._sorted = sorted(self.rows)
        return self._sorted

    def keys_between(self, start: bytes, end: bytes) -> list[bytes]:
        """Row keys strictly between two bound positions."""
        keys = self.sorted_keys()
        return keys[bisect_left(keys, start) : bisect_left(keys, end)]

    def outer_deletion(self, key: bytes) -> Deletion | None:
        """The partition or range deletion that covers a row key (the one that supersedes)."""
        ranged = self.range_tombstones.covering(key) if self.range_tombstones else None
        pd = self.partition_deletion
        if ranged is None:
            return pd
        return ranged if pd is None or ranged > pd else pd

    def shadowed(self, key: bytes, row: RowState) -> RowState | None:
        """A stored row as this partition shows it: without what the partition or range deletions
        covering ``key`` delete (IN PLACE), or None when nothing is left. The store writes a partition
        or range deletion to the header alone and leaves the rows it covers as they were."""
        outer = self.outer_deletion(key)
        if outer is not None:
            row.shadow(outer)
            if row.is_empty():
                return None
        return row

    def add_stored_row(self, key: bytes, row: RowState) -> None:
        """Add a row read from the store (see ``shadowed``)."""
        if self.shadowed(key, row) is not None:
            self.rows[key] = row
            self._sorted = None

    def keys_touched_by(self, prepared: PreparedEvent) -> tuple[set[bytes], bool]:
        """Keys of stored or new rows an event may change, and whether it may change the static row."""
        keys = {key for key, _, _ in prepared.rows}
        static = prepared.static_row is not None
        if prepared.partition_deletion is not None:
            keys.update(self.rows)
            static = True
        else:
            for start, end, _ in prepared.ranges:
                keys.update(self.keys_between(start, end))
        return keys, static

    def next_expiry(self, now_s: int) -> int | None:
        """The earliest time after ``now_s`` at which anything live in the partition expires."""
        best: int | None = None
        rows = list(self.rows.values())
        if self.static_row is not None:
            rows.append(self.static_row)
        for row in rows:
            when = row.next_expiry(now_s)
            if when is not None and (best is None or when < best):
                best = when
        return best

    # -- merging

    def apply(self, event: dict[str, Any], schema: TableSchema) -> ApplyResult:
        """Merge one raw event (a dict as ``schemas.raw_event`` builds it)."""
        return self.apply_prepared(prepare_event(event, layout_for(schema)), layout_for(schema))

    def apply_prepared(self, prepared: PreparedEvent, layout: TableLayout) -> ApplyResult:
        if prepared.partition_key != self.partition_key:
            raise StateError(
                f"event for partition key {prepared.partition_key.hex()} "
                f"applied to partition {self.partition_key.hex()}"
            )
        result = ApplyResult()
        if prepared.partition_deletion is not None:
            self._apply_partition_deletion(prepared.partition_deletion, result)
        for start, end, deletion in prepared.ranges:
            self._apply_range(start, end, deletion, result)
        columns = layout.columns
        counter = prepared.is_counter or layout.is_counter
        if prepared.static_row is not None:
            row = self.static_row if self.static_row is not None else RowState(())
            kept = row.merge(prepared.static_row, self.partition_deletion, columns, counter)
            if kept is not None:
                result.static = True
                result.static_time = kept
            self.static_row = None if row.is_empty() else row
        row_times = result.row_times
        for key, clustering, record in prepared.rows:
            row = self.rows.get(key)
            outer = self.outer_deletion(key)
            if row is None:
                row = RowState(clustering)
                kept = row.merge(record, outer, columns, counter)
                if kept is not None and not row.is_empty():
                    self.rows[key] = row
                    self._sorted = None
                    result.rows.add(key)
                    row_times[key] = kept
                continue
            kept = row.merge(record, outer, columns, counter)
            changed = kept is not None
            if clustering != row.clustering:  # a row stored before clusterings were made canonical
                row.clustering = clustering
                changed = True
            if changed:
                result.rows.add(key)
                if kept is not None:
                    row_times[key] = kept
                if row.is_empty():
                    del self.rows[key]
                    self._sorted = None
        return result

    def _apply_partition_deletion(self, deletion: Deletion, result: ApplyResult) -> None:
        if self.partition_deletion is not None and deletion <= self.partition_deletion:
            return
        self.partition_deletion = deletion
        result.partition_deletion = True
        result.partition_time = deletion.timestamp
        if self.range_tombstones.drop_shadowed(deletion):
            result.range_tombstones = True
        if self.static_row is not None and self.static_row.shadow(deletion):
            result.static = True
            if self.static_row.is_empty():
                self.static_row = None
        for key in list(self.rows):
            self._shadow_row(key, deletion, result)

    def _apply_range(self, start: bytes, end: bytes, deletion: Deletion, result: ApplyResult) -> None:
        if self.partition_deletion is not None and deletion <= self.partition_deletion:
            return
        if not self.range_tombstones.add(start, end, deletion):
            return
        result.range_tombstones = True
        result.range_times.append((start, end, deletion.timestamp))
        for key in self.keys_between(start, end):
            outer = self.range_tombstones.covering(key)
            if outer is not None:
                self._shadow_row(key, outer, result)

    def _shadow_row(self, key: bytes, deletion: Deletion, result: ApplyResult) -> None:
        row = self.rows[key]
        if row.shadow(deletion):
            result.rows.add(key)
            if row.is_empty():
                del self.rows[key]
                self._sorted = None

    # -- time

    def purge(self, now_s: int, gc_grace_seconds: int) -> int:
        """Drop tombstones (and expired data) whose local deletion time is more than gc_grace_seconds ago,
        as compaction would; return how many items went. Visible images do not change."""
        gc_before = now_s - gc_grace_seconds
        dropped = 0
        if self.partition_deletion is not None and self.partition_deletion.local_deletion_time < gc_before:
            self.partition_deletion = None
            dropped += 1
        before = len(self.range_tombstones)
        if self.range_tombstones.purge(gc_before):
            dropped += max(1, before - len(self.range_tombstones))
        if self.static_row is not None:
            dropped += self.static_row.purge(gc_before)
            if self.static_row.is_empty():
                self.static_row = None
        for key in list(self.rows):
            row = self.rows[key]
            dropped += row.purge(gc_before)
            if row.is_empty():
                del self.rows[key]
                self._sorted = None
        return dropped

    def is_empty(self) -> bool:
        """Nothing stored: the partition can be deleted from the store."""
        return (
            self.partition_deletion is None
            and self.static_row is None
            and not self.rows
            and not self.range_tombstones
        )

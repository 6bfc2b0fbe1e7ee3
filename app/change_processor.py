"""Raw events in, change records out, inside one state transaction: dedup, merge, expiry, emit.

No Kafka here: the batch loop hands in decoded raw events and a ``StateTransaction`` per partition, and
sends the records appended to ``out`` in its Kafka transaction. ``process`` and ``expire`` are
generators that yield between chunks of changes, so the changes of a wide partition can go out while it
is still being read, instead of all at the commit. One ``now`` per batch keeps images consistent:
expiries due by ``now`` are emitted before any event of the batch is merged, so a before image is always
the image consumers last saw.

The common event, rows of plain live cells, is merged whole by the native core where it is installed
(``merge_whole``: one call from the stored bytes to the change records); the batch loop offers each event
to it first, and ``process`` (the Python merge, its specification) takes the rest. Once the native merge
took an event of a table in a transaction, the table's next events are offered to it straight from their
raw record's bytes (``merge_raw``), which reads them without building the event's dict; only the events
it leaves are decoded.

What each call did (outcomes, changes emitted, the newest write time merged) goes to the ``BatchTally``
it is given, which the batch loop counts only once the transaction committed; without one, it is counted
at once.

A stored partition whose expiry cannot be computed (a stored value that no longer decodes) raises
``ExpiryFailed`` naming it; the batch loop then runs the pass again with that partition in ``set_aside``:
its due entries leave the index, its rows stay as they are, and ``aside`` says what was set aside, for
the dead-letter topic. One bad partition so never stops the expiry of every other, nor the worker.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from app.worker_stats import BatchTally, WorkerStats
from cassandra_model.errors import ModelError
from cassandra_model.table_schema import TableSchema
from schemas.change_codec import ChangeCodec
from schemas.change_event import ChangeEventError, ChangeSource, clean_topic_name
from schemas.change_json import JsonChangeCodec
from schemas.raw_event import SNAPSHOT_NODE, SNAPSHOT_SEGMENT_ID, is_snapshot_source, raw_event_write_time
from state.change import RowChange
from state.errors import StateError, StoreError
from state.partition_state import ApplyResult, prepare_event
from state.store.column_drops import rows_gone_with_drops
from state.store.merge import expire_partition, merge_event
from state.store.transaction import DueExpiry, StateTransaction
from state.table_layout import layout_for

log = logging.getLogger(__name__)

#: looks at the due entries per expiry pass (each look handles up to ``limit`` of them)
MAX_EXPIRY_ROUNDS = 100


#: what computing a stored partition's changes can raise for the data it holds (a StoreError, RocksDB
#: failing, is not among them: it stops the worker)
MERGE_ERRORS = (StateError, ModelError, ChangeEventError)


@dataclass(slots=True)
class CleanRecord:
    """One record for a clean topic (``value`` None: a tombstone for log compaction). Not frozen: one is
    built per change, and a frozen dataclass's ``__init__`` costs three times as much."""

    topic: str
    key: bytes
    value: bytes | None


@dataclass(slots=True, frozen=True)
class SetAsideExpiry:
    """A stored partition whose expiry could not be computed: its due entries left the index."""

    keyspace: str
    table: str
    table_id: uuid.UUID
    partition_key: bytes
    due_entries: int
    first_due_s: int
    reason: str

    def as_dict(self) -> dict[str, object]:
        return {
            "keyspace": self.keyspace,
            "table": self.table,
            "partition_key": self.partition_key.hex(),
            "due_entries": self.due_entries,
            "first_due_s": self.first_due_s,
            "reason": self.reason,
        }


@dataclass(slots=True)
class _Table:
    """What the processor keeps per table version: its clean topic, its name in the tallies
    ("keyspace.table") and its native merge (None: the Python merge takes its events)."""

    schema: TableSchema
    topic: str
    name: str
    native: Any


class ExpiryFailed(Exception):
    """The expiry of one stored partition failed. What the pass emitted may be sent already, so the
    caller runs it again from the start with ``key`` (table id, partition key) set aside."""

    def __init__(self, key: tuple[uuid.UUID, bytes], reason: str) -> None:
        super().__init__(reason)
        self.key = key
        self.reason = reason


class ChangeProcessor:
    def __init__(
        self,
        *,
        cluster: str,
        topic_prefix: str,
        codec: ChangeCodec,
        stats: WorkerStats,
        refuse_counters: bool = False,
        table_merge: Callable[..., Any] | None = None,
    ) -> None:
        """``table_merge``: the native core's whole-event merge (``cdc_native.TableMerge``, see
        app/worker_core.py), built per table version from the codec's native encoder; None: the Python
        merge takes every event."""
        self.cluster = cluster
        self.topic_prefix = topic_prefix
        self.codec = codec
        self.stats = stats
        self.refuse_counters = refuse_counters
        self.table_merge = table_merge
        #: per table version, by the schema object's id (the entry keeps the object, so the id stays its)
        self._tables: dict[int, _Table] = {}

    def _table(self, schema: TableSchema) -> _Table:
        found = self._tables.get(id(schema))
        if found is not None and found.schema is schema:
            return found
        if len(self._tables) > 4096:
            self._tables.clear()
        table = _Table(
            schema,
            clean_topic_name(self.topic_prefix, schema.keyspace, schema.table),
            f"{schema.keyspace}.{schema.table}",
            None,
        )
        table.native = self._native_merge_of(schema)
        self._tables[id(schema)] = table
        return table

    def _native_merge_of(self, schema: TableSchema) -> Any:
        """Only for tables the native merge can take whole: no static, collection or counter columns, no
        dropped column, and change events the native JSON encoder writes."""
        if self.table_merge is None or not isinstance(self.codec, JsonChangeCodec):
            return None
        layout = layout_for(schema)
        encoder = self.codec.native_encoder(schema)
        if encoder is None or layout.static or layout.is_counter or schema.dropped_columns:
            return None
        return self.table_merge(
            encoder,
            self.cluster,
            schema.keyspace,
            schema.table,
            self.topic_prefix,
            str(schema.table_id),
            (SNAPSHOT_NODE, SNAPSHOT_SEGMENT_ID),
        )

    def native_merge(self, schema: TableSchema) -> Any:
        """The native merge of the table's events (see ``merge_whole``), or None."""
        return self._table(schema).native

    def topic(self, schema: TableSchema) -> str:
        return self._table(schema).topic

    # -- raw events

    def process(
        self,
        txn: StateTransaction,
        event: dict[str, Any],
        schema: TableSchema,
        now_ms: int,
        out: list[CleanRecord],
        tally: BatchTally | None = None,
    ) -> Generator[None, None, str]:
        """Merge one raw event that ``drop_duplicate`` let through with the Python merge (the batch loop
        first offers it to ``merge_whole``) and append its change records to ``out``. Yields whenever
        ``out`` may be sent on (a wide partition's changes come in chunks), and returns the event's
        outcome (see worker_stats); drive it to the end, or roll ``txn`` back."""
        counts = BatchTally() if tally is None else tally
        if schema.is_counter and self.refuse_counters:
            outcome = "refused"
        else:
            txn.remember_digest(event["digest"], now_ms)
            outcome = yield from self._merge(txn, event, schema, now_ms, out, counts)
        counts.record(self._table(schema).name, outcome)
        if tally is None:
            self.stats.add(counts)
        return outcome

    def merge_whole(
        self,
        txn: StateTransaction,
        event: dict[str, Any],
        schema: TableSchema,
        now_ms: int,
        out: list[CleanRecord],
        tally: BatchTally | None = None,
    ) -> str | None:
        """``process`` in one native call, for an event the native merge takes whole (rows of plain
        live cells, a table it merges, a partition without a header, see row_merge.rs): its outcome. None
        when it does not take the event: nothing was written or counted, run ``process``."""
        table = self._table(schema)
        native = table.native
        if native is None or is_snapshot_source(event["source"]):
            return None
        prepared = prepare_event(event, layout_for(schema))
        if (
            prepared.partition_deletion is not None
            or prepared.ranges
            or prepared.static_row is not None
            or prepared.is_counter
        ):
            return None
        keys = [key for key, _, _ in prepared.rows]
        header, stored = txn.load_values(schema, prepared.partition_key, keys)
        if header is not None:
            return None
        source = event["source"]
        merged = native.merge(
            prepared.partition_key,
            prepared.rows,
            stored,
            source["node"],
            source["segment_id"],
            source["entry_offset"],
            now_ms,
        )
        if merged is None:
            return None
        return self._merged(
            txn, table, prepared.partition_key, keys, event["digest"], merged, now_ms, out, tally
        )

    def merge_raw(
        self,
        txn: StateTransaction,
        value: bytes,
        digest: bytes,
        schema: TableSchema,
        now_ms: int,
        out: list[CleanRecord],
        tally: BatchTally | None = None,
    ) -> str | None:
        """``merge_whole`` of the event in a raw record's ``value`` (``digest``: its digest), read by the
        native core without decoding it into a dict: the worker's common event never becomes Python
        objects but its keys. None when the native merge does not take it (another table's id, not an
        event of plain rows of known columns, a partition with a header): nothing was written or
        counted; decode it and go the usual way, which also checks its columns against the schema (an
        event this takes writes only columns the schema has)."""
        table = self._table(schema)
        native = table.native
        if native is None:
            return None
        plain = native.read_plain(value)
        if plain is None:
            return None
        partition_key, clusterings = plain
        order = layout_for(schema).clustering
        keys = [order.key(clustering) for clustering in clusterings]
        header, stored = txn.load_values(schema, partition_key, keys)
        if header is not None:
            return None
        canonical = [order.canonical(clustering) for clustering in clusterings]
        merged = native.merge_raw(value, keys, canonical, stored, now_ms)
        if merged is None:
            return None
        return self._merged(txn, table, partition_key, keys, digest, merged, now_ms, out, tally)

    def _merged(
        self,
        txn: StateTransaction,
        table: _Table,
        partition_key: bytes,
        keys: list[bytes],
        digest: bytes,
        merged: tuple[bool, list[bytes | None], list[tuple[str, bytes, bytes]], int],
        now_ms: int,
        out: list[CleanRecord],
        tally: BatchTally | None,
    ) -> str:
        """What the native merge of one event gave, written to the transaction and counted: its outcome."""
        counts = BatchTally() if tally is None else tally
        changed, values, records, write_time = merged
        txn.remember_digest(digest, now_ms)
        counts.merged_write(write_time)
        if not changed:
            outcome = "late"
        else:
            txn.save_values(
                table.schema,
                partition_key,
                [(k, v) for k, v in zip(keys, values, strict=True) if v is not None],
            )
            topic, name = table.topic, table.name
            for op, key, value in records:
                out.append(CleanRecord(topic, key, value))
                counts.emitted_change(name, op)
            outcome = "applied" if records else "noop"
        counts.record(table.name, outcome)
        counts.natively.append(table.name)
        if tally is None:
            self.stats.add(counts)
        return outcome

    def drop_duplicate(
        self, txn: StateTransaction, table: str, digest: bytes, tally: BatchTally | None = None
    ) -> bool:
        """Whether the update was merged before (a replica's copy, a redelivery); it is then only counted.
        Decided on the event head (``table`` "keyspace.table" and ``digest``, see ``peek_raw_event`` and
        ``raw_event_heads``), so a copy is never decoded."""
        if not txn.seen_digest(digest):
            return False
        if tally is None:
            self.stats.record(table, "duplicate")
        else:
            tally.record(table, "duplicate")
        return True

    def _merge(
        self,
        txn: StateTransaction,
        event: dict[str, Any],
        schema: TableSchema,
        now_ms: int,
        out: list[CleanRecord],
        tally: BatchTally,
    ) -> Generator[None, None, str]:
        snapshot = is_snapshot_source(event["source"])
        prepared = prepare_event(event, layout_for(schema))
        merge = merge_event(txn, schema, prepared, now_ms // 1000, snapshot=snapshot)
        source = event["source"]  # a bootstrap read (snapshot) has no node, segment or offset
        write_time = raw_event_write_time(event)
        tally.merged_write(write_time)
        emitted = 0
        while True:
            try:
                changes = next(merge)
            except StopIteration as done:
                result: ApplyResult = done.value
                break
            for change in changes:
                self._emit(
                    change,
                    schema,
                    ChangeSource(
                        cluster=self.cluster,
                        keyspace=schema.keyspace,
                        table=schema.table,
                        write_time_us=_change_write_time(change, write_time, snapshot=snapshot),
                        node=None if snapshot else source["node"],
                        segment_id=None if snapshot else source["segment_id"],
                        offset=None if snapshot else source["entry_offset"],
                        snapshot=snapshot,
                        name=self.topic_prefix,
                    ),
                    now_ms,
                    out,
                    tally,
                )
            emitted += len(changes)
            yield
        if not result.changed:
            return "late"
        return "applied" if emitted else "noop"

    def _emit(
        self,
        change: RowChange,
        schema: TableSchema,
        source: ChangeSource,
        now_ms: int,
        out: list[CleanRecord],
        tally: BatchTally,
    ) -> None:
        table = self._table(schema)
        key, value = self.codec.encode_change(schema, change, source, now_ms)
        out.append(CleanRecord(table.topic, key, value))
        if change.op == "d":
            out.append(CleanRecord(table.topic, key, None))  # lets log compaction forget the row
        tally.emitted_change(table.name, change.op)

    # -- schema changes

    def drops_to_show(self, txn: StateTransaction, schema: TableSchema) -> TableSchema | None:
        """The table as this raw partition's events last showed it, when ``schema`` dropped columns since
        (``TableSchema.before_drops``); None when there is nothing to show. Which drops a partition has
        shown is kept in its state (meta ``columns_dropped:<table id>``, changelogged), so each drop is
        shown once per partition whatever restarts or takeovers come between: the first schema a
        partition sees of a table is only recorded (its events never showed an older one)."""
        name, current = _drops_shown(schema)
        stored = txn.get_meta(name)
        if stored is None:
            txn.put_meta(name, current)
            return None
        shown: dict[str, int] = json.loads(stored)
        new = [n for n, d in schema.dropped_columns.items() if shown.get(n) != d.dropped_time]
        if not new:
            return None
        return schema.before_drops(new)

    def show_drops(
        self,
        txn: StateTransaction,
        before: TableSchema,
        schema: TableSchema,
        now_ms: int,
        out: list[CleanRecord],
        tally: BatchTally | None = None,
    ) -> Generator[None, None, int]:
        """Emit a delete for every stored row of the table that lived only by the columns ``schema``
        dropped since ``before`` (and the static-only rows that appear or go with them), then record
        the drops as shown. Yields as ``process`` does; returns how many changes it emitted. A delete
        shows the row as it was (``before``'s columns, so encode with ``before``: prepare the codec for
        it first) and carries the time of the drop."""
        counts = BatchTally() if tally is None else tally
        dropped = [n for n in before.regular_columns.keys() | before.static_columns.keys()
                   if schema.dropped_time(n) is not None and before.dropped_time(n) is None]  # fmt: skip
        dropped_at = max((schema.dropped_time(n) or 0 for n in dropped), default=0)
        source = ChangeSource(
            cluster=self.cluster,
            keyspace=schema.keyspace,
            table=schema.table,
            write_time_us=dropped_at or None,
            node=None,
            segment_id=None,
            offset=None,
            name=self.topic_prefix,
        )
        emitted = 0
        for changes in rows_gone_with_drops(txn, before, schema, now_ms // 1000):
            for change in changes:
                self._emit(change, before if change.op == "d" else schema, source, now_ms, out, counts)
            emitted += len(changes)
            yield
        txn.put_meta(*_drops_shown(schema))
        if emitted:
            log.info(
                "%s.%s: %d rows lived only by dropped column(s) %s and are gone; their deletes emitted",
                schema.keyspace, schema.table, emitted, ", ".join(sorted(dropped)),
            )  # fmt: skip
        if tally is None:
            self.stats.add(counts)
        return emitted

    # -- time

    def expire(
        self,
        txn: StateTransaction,
        schemas: dict[uuid.UUID, TableSchema],
        now_ms: int,
        out: list[CleanRecord],
        *,
        limit: int = 10_000,
        tally: BatchTally | None = None,
        set_aside: Mapping[tuple[uuid.UUID, bytes], str] | None = None,
        aside: list[SetAsideExpiry] | None = None,
    ) -> Generator[None, None, int]:
        """Emit the changes of every TTL that expired by ``now``; yields as ``process`` does, and returns
        how many due entries were looked at.

        Everything due by ``now`` is handled before returning (``limit`` only sizes each look), so an
        event merged at ``now`` afterwards starts from the image consumers saw last. The stored
        partitions in ``set_aside`` (with why) lose their due entries instead, each reported in ``aside``;
        ExpiryFailed names a partition whose expiry fails."""
        counts = BatchTally() if tally is None else tally
        now_s = now_ms // 1000
        looked = 0
        for _ in range(MAX_EXPIRY_ROUNDS):
            due = txn.due_expiries(now_s, limit)
            if not due:
                break
            looked += len(due)
            by_partition: dict[tuple[uuid.UUID, bytes], list[DueExpiry]] = defaultdict(list)
            for item in due:
                by_partition[(item.table_id, item.partition_key)].append(item)
            unknown = 0
            for (table_id, partition_key), items in by_partition.items():
                schema = schemas.get(table_id)
                if schema is None:
                    unknown += 1
                    log.warning("expiry due for table %s whose schema is unknown; kept for later", table_id)
                    continue
                reason = None if set_aside is None else set_aside.get((table_id, partition_key))
                if reason is not None:
                    txn.set_aside_due(items)
                    if aside is not None:
                        first_due = min(item.at_s for item in items)
                        aside.append(
                            SetAsideExpiry(
                                schema.keyspace,
                                schema.table,
                                table_id,
                                partition_key,
                                len(items),
                                first_due,
                                reason,
                            )
                        )
                    continue
                try:
                    for first_expiry, changes in expire_partition(txn, schema, partition_key, items, now_s):
                        self._emit_expired(changes, first_expiry, schema, now_ms, out, counts)
                        yield
                except MERGE_ERRORS as exc:
                    if isinstance(exc, StoreError):
                        raise
                    raise ExpiryFailed(
                        (table_id, partition_key),
                        f"the expiry of {schema.keyspace}.{schema.table} partition {partition_key.hex()} "
                        f"failed: {type(exc).__name__}: {exc}",
                    ) from exc
            if unknown == len(by_partition):
                break
        if tally is None:
            self.stats.add(counts)
        return looked

    def _emit_expired(
        self,
        changes: list[RowChange],
        first_expiry: int,
        schema: TableSchema,
        now_ms: int,
        out: list[CleanRecord],
        tally: BatchTally,
    ) -> None:
        # the image just before the first expiry is the one consumers saw last
        source = ChangeSource(
            cluster=self.cluster,
            keyspace=schema.keyspace,
            table=schema.table,
            write_time_us=first_expiry * 1_000_000,
            node=None,
            segment_id=None,
            offset=None,
            expired=True,
            name=self.topic_prefix,
        )
        for change in changes:
            self._emit(change, schema, source, now_ms, out, tally)
        tally.expired_changes += len(changes)


def _drops_shown(schema: TableSchema) -> tuple[str, bytes]:
    """The meta entry saying a partition's events show ``schema``'s drops: its name, and the dropped
    columns with their drop times."""
    current = {n: d.dropped_time for n, d in schema.dropped_columns.items()}
    return f"columns_dropped:{schema.table_id}", json.dumps(current, sort_keys=True).encode()


def _change_write_time(change: RowChange, event_time: int, *, snapshot: bool) -> int:
    """The time of the write that made the change (see ``RowChange.write_time``). A bootstrap read is
    no write: it carries the row's newest visible cell, as Cassandra's WRITETIME shows it."""
    if not snapshot and change.write_time is not None:
        return change.write_time
    if change.after is not None:
        return change.after.write_time() or event_time
    return event_time

"""Raw events in, change records out, inside one state transaction: dedup, merge, expiry, emit.

No Kafka here: the batch loop hands in decoded raw events and a ``StateTransaction`` per partition, and
sends the returned records in its Kafka transaction. One ``now`` per batch keeps images consistent:
expiries due by ``now`` are emitted before any event of the batch is merged, so a before image is always
the image consumers last saw.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from agents.commitlog.table_schema import TableSchema
from app.worker_stats import WorkerStats
from schemas.change_codec import ChangeCodec
from schemas.change_event import ChangeSource, clean_topic_name
from schemas.raw_event import RawEventHead, is_snapshot_source
from state.change import RowChange, apply_prepared_with_changes, expiry_changes
from state.partition_state import PartitionState, prepare_event
from state.snapshot_lists import adopt_snapshot_list_paths, drop_known_list_elements
from state.store_transaction import DueExpiry, StateTransaction
from state.table_layout import layout_for

log = logging.getLogger(__name__)

#: looks at the due entries per expiry pass (each look handles up to ``limit`` of them)
MAX_EXPIRY_ROUNDS = 100


@dataclass(slots=True, frozen=True)
class CleanRecord:
    topic: str
    key: bytes
    value: bytes | None


def event_write_time(event: dict[str, Any]) -> int:
    """The largest write timestamp (µs) in a raw event: its cells, livenesses and deletions."""
    best = -(2**63)

    def deletion(d: dict[str, Any] | None) -> None:
        nonlocal best
        if d is not None and d["timestamp"] > best:
            best = d["timestamp"]

    def row(r: dict[str, Any] | None) -> None:
        nonlocal best
        if r is None:
            return
        deletion(r.get("deletion"))
        liveness = r.get("liveness")
        if liveness is not None and liveness["timestamp"] > best:
            best = liveness["timestamp"]
        for cell in r["cells"]:
            if cell["timestamp"] > best:
                best = cell["timestamp"]
        for complex_deletion in r.get("complex_deletions") or ():
            deletion(complex_deletion.get("deletion"))

    deletion(event["partition_deletion"])
    row(event["static_row"])
    for r in event["rows"]:
        row(r)
    for marker in event["range_tombstones"]:
        deletion(marker.get("deletion"))
        deletion(marker.get("start_deletion"))
    return best


class ChangeProcessor:
    def __init__(
        self,
        *,
        cluster: str,
        topic_prefix: str,
        codec: ChangeCodec,
        stats: WorkerStats,
        refuse_counters: bool = False,
    ) -> None:
        self.cluster = cluster
        self.topic_prefix = topic_prefix
        self.codec = codec
        self.stats = stats
        self.refuse_counters = refuse_counters
        self._topics: dict[uuid.UUID, str] = {}

    def topic(self, schema: TableSchema) -> str:
        topic = self._topics.get(schema.table_id)
        if topic is None:
            topic = self._topics[schema.table_id] = clean_topic_name(
                self.topic_prefix, schema.keyspace, schema.table
            )
        return topic

    # -- raw events

    def process(
        self,
        txn: StateTransaction,
        event: dict[str, Any],
        schema: TableSchema,
        now_ms: int,
        out: list[CleanRecord],
    ) -> str:
        """Merge one raw event that ``drop_duplicate`` let through; append its change records to ``out``;
        return its outcome (see worker_stats)."""
        if schema.is_counter and self.refuse_counters:
            outcome = "refused"
        else:
            txn.remember_digest(event["digest"], now_ms)
            outcome = self._merge(txn, event, schema, now_ms, out)
        self.stats.record(f"{schema.keyspace}.{schema.table}", outcome)
        return outcome

    def drop_duplicate(self, txn: StateTransaction, head: RawEventHead) -> bool:
        """Whether the update was merged before (a replica's copy, a redelivery); it is then only counted.
        Decided on the event head, so a copy is never decoded."""
        if not txn.seen_digest(head.digest):
            return False
        self.stats.record(f"{head.keyspace}.{head.table}", "duplicate")
        return True

    def _merge(
        self,
        txn: StateTransaction,
        event: dict[str, Any],
        schema: TableSchema,
        now_ms: int,
        out: list[CleanRecord],
    ) -> str:
        now_s = now_ms // 1000
        layout = layout_for(schema)
        prepared = prepare_event(event, layout)
        state = txn.load(schema, prepared, now_s)
        snapshot = is_snapshot_source(event["source"])
        if snapshot:
            drop_known_list_elements(state, prepared, layout)
        else:
            adopt_snapshot_list_paths(state, prepared, layout)
        result, changes = apply_prepared_with_changes(state, prepared, layout, now_s)
        if not result.changed:
            return "late"
        txn.save(
            schema,
            state,
            result.rows,
            now_s,
            header=result.partition_deletion or result.static or result.range_tombstones,
        )
        if not changes:
            return "noop"
        source = event["source"]  # a bootstrap read (snapshot) has no node, segment or offset
        write_time = event_write_time(event)
        for change in changes:
            self._emit(
                change,
                schema,
                ChangeSource(
                    cluster=self.cluster,
                    keyspace=schema.keyspace,
                    table=schema.table,
                    write_time_us=_change_write_time(change, write_time),
                    node=None if snapshot else source["node"],
                    segment_id=None if snapshot else source["segment_id"],
                    offset=None if snapshot else source["entry_offset"],
                    snapshot=snapshot,
                ),
                now_ms,
                out,
            )
        return "applied"

    def _emit(
        self,
        change: RowChange,
        schema: TableSchema,
        source: ChangeSource,
        now_ms: int,
        out: list[CleanRecord],
    ) -> None:
        topic = self.topic(schema)
        key, value = self.codec.encode_change(schema, change, source, now_ms)
        out.append(CleanRecord(topic, key, value))
        if change.op == "d":
            out.append(CleanRecord(topic, key, None))  # lets log compaction forget the row
        self.stats.emitted(f"{schema.keyspace}.{schema.table}", change.op)

    # -- time

    def expire(
        self,
        txn: StateTransaction,
        schemas: dict[uuid.UUID, TableSchema],
        now_ms: int,
        out: list[CleanRecord],
        *,
        limit: int = 10_000,
    ) -> int:
        """Emit the changes of every TTL that expired by ``now``; return how many entries were looked at.

        Everything due by ``now`` is handled before returning (``limit`` only sizes each look), so an
        event merged at ``now`` afterwards starts from the image consumers saw last."""
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
                self._expire_partition(txn, schema, partition_key, items, now_ms, out)
            if unknown == len(by_partition):
                break
        return looked

    def _expire_partition(
        self,
        txn: StateTransaction,
        schema: TableSchema,
        partition_key: bytes,
        items: list[DueExpiry],
        now_ms: int,
        out: list[CleanRecord],
    ) -> None:
        now_s = now_ms // 1000
        first = min(i.at_s for i in items)
        state = txn.load_rows(
            schema, partition_key, [i.clustering_key for i in items], since_s=first - 1, now_s=now_s
        )
        if schema.static_columns:
            # a static expiry changes every row (load_rows then loaded them all): one look at the partition
            views = [(state, first)]
        else:
            views = [(_view_of(state, i.clustering_key), i.at_s) for i in items]
        keys: set[bytes | None] = {i.clustering_key for i in items}
        for view, first_expiry in views:
            # the image just before the first expiry is the one consumers saw last
            for change in expiry_changes(view, schema, first_expiry - 1, now_s):
                keys.add(change.key)
                self._emit(
                    change,
                    schema,
                    ChangeSource(
                        cluster=self.cluster,
                        keyspace=schema.keyspace,
                        table=schema.table,
                        write_time_us=first_expiry * 1_000_000,
                        node=None,
                        segment_id=None,
                        offset=None,
                        expired=True,
                    ),
                    now_ms,
                    out,
                )
                self.stats.expired_changes.inc()
        # every key a change named is saved (its due entry moves on), None = the header and static row
        txn.save(schema, state, keys, now_s, header=None in keys)


def _change_write_time(change: RowChange, event_time: int) -> int:
    """A created or updated row's newest visible write; a deletion's is the event's."""
    if change.after is not None:
        return change.after.write_time() or event_time
    return event_time


def _view_of(state: PartitionState, key: bytes | None) -> PartitionState:
    """The partition with only one due row (of a table without static columns)."""
    if key is None:
        return state
    row = state.rows.get(key)
    return PartitionState(
        state.partition_key,
        state.partition_deletion,
        None,
        {key: row} if row is not None else {},
        state.range_tombstones,
    )

"""A worker's batches without Kafka: its ChangeProcessor on one real partition store, as BatchLoop drives
them, for tests that follow the records of a few raw events through the worker's own path.

Per batch, at the batch's ``now``: the expiries due (they also purge tombstones), the digests past the
horizon forgotten, then each raw event ``drop_duplicate`` lets through (``merge_whole``, else
``process``); one store commit. The store is built from a WorkerConfig as the worker builds it (its
tombstone floor).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from app.change_processor import ChangeProcessor, CleanRecord
from app.worker_stats import WorkerStats
from cassandra_model.table_schema import TableSchema
from runtime.config import WorkerConfig
from schemas.change_codec import ChangeCodec
from schemas.change_json import JsonChangeCodec
from schemas.raw_event import encode_raw_event, raw_event_heads
from state.store.partition_store import PartitionStore, StoreOptions

T = TypeVar("T")


def _head_of(value: bytes) -> tuple[str, bytes]:
    """The table and digest the batch loop reads of a raw record (``raw_event_heads``)."""
    head = raw_event_heads([value])[0]
    assert head is not None
    return head


def drive(steps: Generator[None, None, T]) -> T:
    """Run one of the processor's generators to its end (the batch loop sends records between steps)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


class BatchDriver:
    """One raw partition of a worker running with ``settings`` (default: the config's defaults);
    ``table_merge`` as ChangeProcessor's (the native whole-event merge); ``raw``: each event is first
    offered to ``merge_raw`` from its encoded bytes, as the batch loop does once its table's events are
    merged natively."""

    def __init__(
        self,
        path: Path,
        schemas: Sequence[TableSchema],
        *,
        codec: ChangeCodec | None = None,
        settings: WorkerConfig | None = None,
        table_merge: Callable[..., Any] | None = None,
        raw: bool = False,
    ) -> None:
        self.settings = settings if settings is not None else WorkerConfig(data_directory=path)
        self.store = PartitionStore(path, 0, StoreOptions(tombstone_floor_s=self.settings.tombstone_floor))
        self.codec = codec if codec is not None else JsonChangeCodec()
        self.stats = WorkerStats()
        self.processor = ChangeProcessor(
            cluster="c1", topic_prefix="clean", codec=self.codec, stats=self.stats, table_merge=table_merge
        )
        self.schemas: dict[uuid.UUID, TableSchema] = {s.table_id: s for s in schemas}
        self.raw = raw

    def __enter__(self) -> BatchDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.store.close()

    def batch(self, now_s: int, *events: dict[str, Any]) -> list[CleanRecord]:
        """One batch at ``now_s``; the records it sends."""
        now_ms = now_s * 1000
        out: list[CleanRecord] = []
        txn = self.store.transaction()
        drive(self.processor.expire(txn, self.schemas, now_ms, out))
        txn.expire_digests(now_ms - self.settings.digest_horizon_s * 1000, 100_000)
        for event in events:
            value = encode_raw_event(event)
            table, digest = _head_of(value)
            if not self.processor.drop_duplicate(txn, table, digest):
                schema = self.schemas[uuid.UUID(str(event["table_id"]))]
                if self.raw and self.processor.merge_raw(txn, value, digest, schema, now_ms, out) is not None:
                    continue
                if self.processor.merge_whole(txn, event, schema, now_ms, out) is None:
                    drive(self.processor.process(txn, event, schema, now_ms, out))
        txn.commit(None, self.store.changelog_offset + len(txn.changelog()))
        return out

    def changes(self, now_s: int, *events: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """``batch``, as (op, after image or else before image) per change event."""
        out = []
        for record in self.batch(now_s, *events):
            if record.value is not None:
                value = self.codec.decode_value(record.value)
                out.append((value["op"], value["after"] or value["before"]))
        return out

"""One batch of raw events: restore what is new, merge, then commit state, clean events and offsets at once.

The raw consumer hands each batch here; its offsets are committed only in the batch's Kafka
transaction, so the group's position never runs ahead of what was merged and emitted. Any failure
stops the worker (fail-stop): nothing of the failed batch is visible, the local stores are untouched,
and the batch is merged again by whichever worker owns the partitions next.

Change records wait in memory for the commit, except that once SEND_EARLY_RECORDS of them are held they
are sent into the batch's transaction, begun early for that. A partition deletion or a static write in
a wide partition emits one change per row, and they stream out that way; they still become visible only
at the commit, with everything else.

The expiry timer runs its transactions under the same lock, so a batch and an expiry never interleave.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Generator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, TypeVar

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from app.change_processor import ChangeProcessor, CleanRecord
from app.errors import TransactionFailed
from app.partition_states import PartitionStates
from app.raw_consumer import RawRecord
from app.transactional_sink import OpenTransaction, TransactionalSink
from app.worker_stats import WorkerStats
from cassandra_model.table_schema import TableSchema
from runtime.config import KafkaConfig
from runtime.kafka_topics import TopicSpec, ensure_topics
from schemas.raw_event import RawEventError, decode_raw_event, peek_raw_event
from schemas.schema_topic import TableSchemas
from state.store.transaction import StateTransaction

log = logging.getLogger(__name__)

#: how long a raw event waits for its table's schema to arrive before it is dead-lettered
SCHEMA_WAIT_S = 15.0
#: how long a batch is retried while Kafka does not answer, before the worker stops
RETRY_FOR_S = 180.0
#: digests older than the horizon are forgotten this often
DIGEST_EXPIRY_EVERY_S = 60.0
#: change records held before they are sent on in the batch's open transaction (a wide partition's
#: changes stream out this way rather than waiting, all of them, for the commit)
SEND_EARLY_RECORDS = 10_000

T = TypeVar("T")


async def _uncancellable(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` to its end even when the caller is cancelled meanwhile (then re-raise the cancel
    after it finished, so the lock held around it is released only when the stores are consistent)."""
    task = asyncio.ensure_future(work)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await asyncio.shield(task)
        raise


@dataclass(slots=True, frozen=True)
class _NeedsSchema:
    """A decoded raw event whose table schema is not known (or not prepared for the codec) yet."""

    table_id: uuid.UUID
    event: dict[str, Any]


@dataclass(slots=True, frozen=True)
class _Ready:
    """A decoded raw event and its table's schema, ready to merge."""

    event: dict[str, Any]
    schema: TableSchema


@dataclass(slots=True, frozen=True)
class Topics:
    raw: str
    changelog: str
    dead_letter: str
    group_id: str
    clean_partitions: int
    replication_factor: int


class BatchLoop:
    def __init__(
        self,
        *,
        kafka: KafkaConfig,
        topics: Topics,
        partitions: PartitionStates,
        schemas: TableSchemas,
        processor: ChangeProcessor,
        sink: TransactionalSink,
        stats: WorkerStats,
        digest_horizon_s: int,
    ) -> None:
        self.kafka = kafka
        self.topics = topics
        self.partitions = partitions
        self.schemas = schemas
        self.processor = processor
        self.sink = sink
        self.stats = stats
        self.digest_horizon_ms = digest_horizon_s * 1000
        self.lock = asyncio.Lock()
        self._clean_topics: set[str] = set()
        self._prepared: dict[uuid.UUID, TableSchema] = {}
        self._table_ids: dict[str, uuid.UUID] = {}
        self._last_digest_expiry = 0.0
        #: the batch's Kafka transaction, once records were sent before its commit
        self._open: OpenTransaction | None = None
        self.failed: BaseException | None = None

    async def restart_sink(self) -> None:
        """A new transactional producer, between batches (never under a transaction in flight)."""
        async with self.lock:
            await self.sink.restart()

    async def restore_assigned(self) -> None:
        """Restore every assigned partition not restored yet (between batches)."""
        async with self.lock:
            await self.partitions.restore(self.partitions.unrestored(self.partitions.assigned))

    # -- batches of raw events

    async def process(self, records: Sequence[RawRecord], current: Callable[[], bool] = lambda: True) -> int:
        """Merge and commit one batch; return how many records were this worker's to process.

        ``current`` says whether the batch still belongs to this worker's assignment (no rebalance since
        it was fetched); it is asked under the lock, which a rebalance also takes. A transaction that
        fails because Kafka is away is retried from scratch (the stores were rolled back) with a new
        producer, for up to RETRY_FOR_S; then, or when fenced, the error goes up."""
        waited, attempt = 0.0, 0
        while True:
            try:
                return await self._process_once(records, current)
            except (TransactionFailed, KafkaError, OSError) as exc:  # Kafka away: topics, restore, commit
                if getattr(exc, "fatal", False) or waited >= RETRY_FOR_S:
                    raise
                delay = min(5.0, 0.5 * 2**attempt)
                attempt += 1
                log.warning("batch not committed (%s); retrying in %.1f s", exc, delay)
                await asyncio.sleep(delay)
                waited += delay
                try:
                    await self.restart_sink()
                except (KafkaError, OSError) as restart_error:
                    log.warning("cannot restart the transactional producer yet: %r", restart_error)

    async def _process_once(self, records: Sequence[RawRecord], current: Callable[[], bool]) -> int:
        async with self.lock:
            if not current():
                log.info(
                    "batch of %d records fetched before a rebalance: left to be fetched again", len(records)
                )
                return 0
            started = time.perf_counter()
            assigned = self.partitions.assigned
            mine = [r for r in records if r.partition in assigned]
            log.debug("batch of %d records, %d of assigned partitions", len(records), len(mine))
            if not mine:
                return 0
            await self.partitions.restore(self.partitions.unrestored({r.partition for r in mine}))
            now_ms = int(time.time() * 1000)
            txns: dict[int, StateTransaction] = {}
            out: list[CleanRecord] = []
            dead: list[tuple[RawRecord, str]] = []
            last: dict[int, int] = {}
            schemas = self._schemas_by_id()
            try:
                for record in mine:
                    txn = txns.get(record.partition)
                    if txn is None:
                        txn = txns[record.partition] = self.partitions.store(record.partition).transaction()
                        # what expired by now goes out before any event is merged on top of it
                        await self._drive(self.processor.expire(txn, schemas, now_ms, out), out)
                    last[record.partition] = record.offset  # a partition's records come in offset order
                    problem = self._decode(txn, record)
                    if isinstance(problem, _NeedsSchema):
                        problem = await self._schema_for(problem)
                    if isinstance(problem, _Ready):
                        await self._drive(
                            self.processor.process(txn, problem.event, problem.schema, now_ms, out), out
                        )
                    elif problem is not None:
                        dead.append((record, problem))
            except BaseException:
                for txn in txns.values():
                    txn.rollback()
                await self._abort_open()
                raise
            offsets = {TopicPartition(self.topics.raw, p): offset + 1 for p, offset in last.items()}
            # once begun, a commit runs to its end even if the task is cancelled meanwhile: the local
            # stores must follow what Kafka committed, or the next batch would merge on stale state
            await _uncancellable(self._commit_or_rollback(txns, out, dead, offsets))
            self.stats.batches.observe(time.perf_counter() - started)
            return len(mine)

    def _decode(self, txn: StateTransaction, record: RawRecord) -> _Ready | _NeedsSchema | str | None:
        """What to do with one record: merge it, wait for its table's schema first (the only part that
        awaits), dead-letter it (why), or nothing (a copy already merged)."""
        if record.value is None:
            return "raw record without a value"
        try:
            if self.processor.drop_duplicate(txn, peek_raw_event(record.value)):
                return None
            event = decode_raw_event(record.value)
        except RawEventError as exc:
            return str(exc)
        table_id = self._table_ids.get(event["table_id"])
        if table_id is None:
            table_id = self._table_ids[event["table_id"]] = uuid.UUID(event["table_id"])
        schema = self.schemas.get(table_id)
        if schema is None or schema is not self._prepared.get(table_id):
            return _NeedsSchema(table_id, event)
        return _Ready(event, schema)

    async def _schema_for(self, pending: _NeedsSchema) -> _Ready | str:
        """Wait for the schema of an event's table (and prepare the codec for it)."""
        table_id, event = pending.table_id, pending.event
        schema = self.schemas.get(table_id) or await self.schemas.wait_for(table_id, SCHEMA_WAIT_S)
        if schema is None:
            self.stats.unknown_table_events.inc()
            return (
                f"no schema for table {event['keyspace']}.{event['table']} ({table_id}) on the schema topic "
                f"{self.schemas.topic} after {SCHEMA_WAIT_S:.0f} s"
            )
        if schema is not self._prepared.get(table_id):
            await self.processor.codec.prepare(schema)  # registry calls happen here, off the event loop
            self._prepared[table_id] = schema
        return _Ready(event, schema)

    async def _drive(self, steps: Generator[None, None, T], out: list[CleanRecord]) -> T:
        """Run a processor step to its end, sending ``out`` on whenever it holds SEND_EARLY_RECORDS."""
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            if len(out) >= SEND_EARLY_RECORDS:
                await self._send_early(out)

    async def _send_early(self, out: list[CleanRecord]) -> None:
        """Send the change records so far in the batch's transaction (begun here if need be)."""
        await self._ensure_clean_topics({r.topic for r in out})
        if self._open is None:
            self._open = await self.sink.begin()
        await self._open.send_all((clean.topic, clean.key, clean.value, None) for clean in out)
        self.stats.sent_early.inc(len(out))
        out.clear()

    async def _abort_open(self) -> None:
        tx, self._open = self._open, None
        if tx is not None:
            await tx.abort()

    def _schemas_by_id(self) -> dict[uuid.UUID, TableSchema]:
        return {s.table_id: s for s in self.schemas.tables()}

    # -- the passing of time

    async def expire(self) -> int:
        """Emit what expired since the last look, and forget old digests, in one transaction."""
        async with self.lock:
            stores = self.partitions.ready
            if not stores:
                return 0
            now_ms = int(time.time() * 1000)
            forget = time.monotonic() - self._last_digest_expiry >= DIGEST_EXPIRY_EVERY_S
            txns: dict[int, StateTransaction] = {}
            out: list[CleanRecord] = []
            looked = 0
            schemas = self._schemas_by_id()
            try:
                for partition, store in stores.items():
                    txn = txns[partition] = store.transaction()
                    looked += await self._drive(self.processor.expire(txn, schemas, now_ms, out), out)
                    if forget:
                        self.stats.digests_expired.inc(
                            txn.expire_digests(now_ms - self.digest_horizon_ms, 100_000)
                        )
            except BaseException:
                for txn in txns.values():
                    txn.rollback()
                await self._abort_open()
                raise
            if self._open is not None or out or any(txn.changelog() for txn in txns.values()):
                await _uncancellable(self._commit_or_rollback(txns, out, [], {}))
            else:
                for txn in txns.values():
                    txn.rollback()
            if forget:
                self._last_digest_expiry = time.monotonic()
            return looked

    # -- committing

    async def _commit_or_rollback(
        self,
        txns: dict[int, StateTransaction],
        out: list[CleanRecord],
        dead: list[tuple[RawRecord, str]],
        offsets: dict[TopicPartition, int],
    ) -> None:
        try:
            await self._commit(txns, out, dead, offsets)
        except BaseException:
            for txn in txns.values():
                if txn.is_open:
                    txn.rollback()
            await self._abort_open()
            raise

    async def _commit(
        self,
        txns: dict[int, StateTransaction],
        out: list[CleanRecord],
        dead: list[tuple[RawRecord, str]],
        offsets: dict[TopicPartition, int],
    ) -> None:
        await self._ensure_clean_topics({r.topic for r in out})
        tx, self._open = self._open, None
        if tx is None:
            tx = await self.sink.begin()
        try:
            for record, reason in dead:
                log.error(
                    "raw record %s[%d]@%d dead-lettered to %s: %s",
                    self.topics.raw, record.partition, record.offset, self.topics.dead_letter, reason,
                )  # fmt: skip
            await tx.send_all(
                chain(
                    ((clean.topic, clean.key, clean.value, None) for clean in out),
                    ((self.topics.dead_letter, record.key, record.value, None) for record, _ in dead),
                    (
                        (self.topics.changelog, key, value, partition)
                        for partition, txn in txns.items()
                        for key, value in txn.changelog()
                    ),
                )
            )
            written = await tx.commit(offsets, self.topics.group_id)
        except TransactionFailed:
            self.stats.transactions_failed.inc()
            raise
        except (KafkaError, OSError, AssertionError) as exc:  # aiokafka asserts on its fatal states
            await tx.abort()
            self.stats.transactions_failed.inc()
            raise TransactionFailed(f"sending the batch failed: {exc!r}") from exc
        except BaseException:
            await tx.abort()
            self.stats.transactions_failed.inc()
            raise
        for partition, txn in txns.items():
            store = self.partitions.store(partition)
            changelog_next = written.get(
                TopicPartition(self.topics.changelog, partition), store.changelog_offset
            )
            source_next = offsets.get(TopicPartition(self.topics.raw, partition))
            txn.commit(source_next, changelog_next)
        self.stats.last_commit_time.set(time.time())

    async def _ensure_clean_topics(self, names: set[str]) -> None:
        new = names - self._clean_topics
        if not new:
            return
        await ensure_topics(
            self.kafka,
            [
                TopicSpec(
                    name,
                    self.topics.clean_partitions,
                    self.topics.replication_factor,
                    {"cleanup.policy": "compact"},
                )
                for name in sorted(new)
            ],
        )
        self._clean_topics |= new

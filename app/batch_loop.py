"""One batch of raw events: each raw partition merged in turn, and committed on its own as soon as it is.

The raw consumer hands each batch here. Per raw partition the batch is one state transaction and one
Kafka transaction (the partition's own transactional id, see app/partition_producers.py) holding that
partition's state changelog, its change events and dead letters, and its consumed offset. A
partition's transaction is sent and committed as soon as the partition is merged, while the next one is
merged (the merge makes way for it every YIELD_EVERY records): the round trips of a dozen transactions
hide behind the CPU of the merge. So the group's position on a partition never runs ahead of what was
merged and emitted, and a worker that lost the partition cannot commit on it any more.

Taking a partition over (app/partition_takeover.py: at assignment, and again after any failed transaction)
registers its transactional id first, which fences the previous owner and finishes its last transaction,
then restores the store from the changelog and reads where the group resumes the partition; records below
that offset are never merged again. A commit whose outcome is unknown (``TransactionInDoubt``: a timeout, a
connection cut after the commit request left) is settled that way: the changelog then holds its records or
not, and the group's offset says whether its raw records were consumed. Nothing is emitted twice and
nothing is lost. While Kafka is away this is retried for ``outage_timeout_s`` (`worker.outage_timeout_s`,
RETRY_FOR_S by default), counted on the clock from the batch's first failure, then the worker stops; a fence
stops it at once (fail-stop). No step of an attempt waits for Kafka without a deadline: each Kafka step of a
transaction has the step timeout (app/transactional_sink.py), a producer's stop STOP_TIMEOUT_S
(runtime/kafka_clients.py), a take-over its registration and reads theirs. How the outage goes is told in
a few log lines and on `/health` (app/kafka_status.py), not one line per attempt.

Change records wait in memory for the commit, except that once SEND_EARLY_RECORDS of a partition's are
held they are sent into its transaction, begun early for that. A partition deletion or a static write in
a wide partition emits one change per row, and they stream out that way; they still become visible only
at the commit, with everything else.

A raw record that cannot be merged goes to the dead-letter topic (key and value as read, headers naming the
reason and the raw topic, partition and offset): no schema for its table, a column its schema does not
have (after waiting for a newer schema, see app/event_columns.py), or a merge that fails (a value,
clustering or counter context the state cannot take). A failed merge is undone to the savepoint set before
the event (StateTransaction.savepoint), so the batch goes on without it. A stored partition whose expiry
fails is set aside the same way (app/change_processor.py, ``ExpiryFailed``): its due entries go, and a
dead letter names its table and partition key.

The expiry timer runs its transactions under the same lock, so a batch and an expiry never interleave.
With heartbeats on (app/heartbeat.py), a heartbeat due is committed after a batch's transactions, in one of
its own (the worker's heartbeat producer), and ``beat`` commits one when no batch came. What a transaction
did is counted in the stats only once it committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Generator, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, TypeVar

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from app.change_processor import MERGE_ERRORS, ChangeProcessor, ExpiryFailed
from app.errors import TransactionFailed, TransactionInDoubt
from app.event_columns import EventColumns, unplaced_columns
from app.group_offsets import GroupOffsets
from app.heartbeat import Heartbeat
from app.kafka_status import KafkaStatus
from app.partition_batch import DeadLetter, PartitionBatch
from app.partition_producers import PartitionProducers
from app.partition_states import PartitionStates
from app.partition_takeover import InDoubt, PartitionTakeover
from app.raw_consumer import RawRecord
from app.transactional_sink import Outgoing, TransactionalSink
from app.worker_core import AVAILABLE, event_reader, heads_reader
from app.worker_stats import BatchTally, TallyMark, WorkerStats
from cassandra_model.table_schema import TableSchema
from runtime.config import KafkaConfig
from runtime.kafka_topics import TopicSpec, ensure_topics
from schemas.raw_event import RawEventError, peek_raw_event
from schemas.schema_topic import TableSchemas
from state.errors import StoreError

log = logging.getLogger(__name__)

#: how long a raw event waits for its table's schema (or a newer one, with its columns) to arrive before
#: it is dead-lettered
SCHEMA_WAIT_S = 15.0
#: how long a batch is retried while Kafka does not answer, before the worker stops (the default of
#: `worker.outage_timeout_s`)
RETRY_FOR_S = 180.0
#: digests older than the horizon are forgotten this often
DIGEST_EXPIRY_EVERY_S = 60.0
#: change records of a partition held before they are sent on in its open transaction (a wide
#: partition's changes stream out this way rather than waiting, all of them, for the commit)
SEND_EARLY_RECORDS = 10_000
#: how often an expiry tick waiting for a batch looks whether that batch meets failed commits
LOCK_LOOK_EVERY_S = 1.0
#: records merged between two chances for the other tasks (the commits of the partitions merged before,
#: the consumer's fetches) to go on
YIELD_EVERY = 250
#: dead-letter record headers
REASON_HEADER, KIND_HEADER = "cdc.reason", "cdc.reason.kind"
TOPIC_HEADER, PARTITION_HEADER, OFFSET_HEADER = "cdc.raw.topic", "cdc.raw.partition", "cdc.raw.offset"

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


@dataclass(slots=True)
class _NeedsSchema:
    """A decoded raw event whose table schema is not known, not prepared for the codec, or too old for
    the columns the event writes."""

    record: RawRecord
    table_id: uuid.UUID
    event: dict[str, Any]


@dataclass(slots=True)
class _Ready:
    """A decoded raw event and its table's schema, ready to merge (not frozen, as ``_NeedsSchema``: one
    is built per merged event, and a frozen dataclass's ``__init__`` costs three times as much)."""

    event: dict[str, Any]
    schema: TableSchema


class _MergeAgain(Exception):
    """A raw event's merge failed after some of its changes were sent early (they cannot be taken back):
    its partition's share of the batch is merged again from the start, the event dead-lettered."""


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
        producers: PartitionProducers,
        group_offsets: GroupOffsets,
        stats: WorkerStats,
        digest_horizon_s: int,
        heartbeat: Heartbeat | None = None,
        heartbeat_sink: TransactionalSink | None = None,
        reposition: Callable[[int, int], None] | None = None,
        kafka_status: KafkaStatus | None = None,
        outage_timeout_s: float | None = None,
        core: str = AVAILABLE,
    ) -> None:
        """``reposition(partition, offset)`` moves the raw consumer (None: nothing to move, in tests);
        ``outage_timeout_s`` None: RETRY_FOR_S; ``core`` is the per-record core (app/worker_core.py)."""
        self.kafka = kafka
        self.topics = topics
        self.partitions = partitions
        self.schemas = schemas
        self.processor = processor
        self.producers = producers
        self.takeover = PartitionTakeover(topics.raw, partitions, producers, group_offsets, reposition)
        self.stats = stats
        self.digest_horizon_ms = digest_horizon_s * 1000
        self.heartbeat = heartbeat
        self.heartbeat_sink = heartbeat_sink
        self.lag = stats.lag
        self.lock = asyncio.Lock()
        self._clean_topics: set[str] = set()
        #: per table, the schema version the codec is prepared for, and its columns
        self._prepared: dict[uuid.UUID, EventColumns] = {}
        self._table_ids: dict[str, uuid.UUID] = {}
        self._last_digest_expiry = 0.0
        #: raw records to dead-letter without merging them again: (partition, offset) -> reason
        self._poison: dict[tuple[int, int], str] = {}
        #: stored partitions whose expiry failed, to set aside: (raw partition, table id, key) -> reason
        self._expiry_poison: dict[tuple[int, uuid.UUID, bytes], str] = {}
        #: per raw partition, per table, the schema version whose dropped columns a committed
        #: transaction showed (so the next batches need not look at the partition's state for it)
        self._drops_shown: dict[int, dict[uuid.UUID, TableSchema]] = {}
        self._heartbeat_broken = False
        self.failed: BaseException | None = None
        #: the table and digest of each record of a batch (app/worker_core.py)
        self._heads = heads_reader(core)
        #: a raw record's event, for the records that are no copy (app/worker_core.py)
        self._read_event = event_reader(core)
        self.outage_timeout_s = outage_timeout_s
        self.kafka_status = (
            kafka_status
            if kafka_status is not None
            else KafkaStatus(kafka.bootstrap_servers, self.retry_for_s)
        )

    @property
    def retry_for_s(self) -> float:
        """How long a batch is retried while Kafka does not take its commits."""
        return RETRY_FOR_S if self.outage_timeout_s is None else self.outage_timeout_s

    # -- the partitions this worker owns

    async def restore_assigned(self) -> None:
        """Take over every assigned partition not taken over yet (between batches)."""
        async with self.lock:
            await self._acquire(self.takeover.pending(self.partitions.assigned))

    async def release(self, partitions: set[int]) -> None:
        """Partitions revoked (a batch in flight commits first): close their stores, stop their producers."""
        async with self.lock:
            await self.takeover.release(partitions)
            for key in [k for k in self._poison if k[0] in partitions]:
                del self._poison[key]
            for aside in [k for k in self._expiry_poison if k[0] in partitions]:
                del self._expiry_poison[aside]
            for partition in partitions:
                self._drops_shown.pop(partition, None)

    async def _acquire(self, partitions: set[int]) -> None:
        """Take ``partitions`` over (app/partition_takeover.py), counting the transactions in doubt on
        them that turn out to have committed."""
        for tally, offsets in await self.takeover.acquire(partitions):
            self._counted(tally, offsets)

    # -- batches of raw events

    async def process(self, records: Sequence[RawRecord], current: Callable[[], bool] = lambda: True) -> int:
        """Merge and commit one batch; return how many records were this worker's to process.

        ``current`` says whether the batch still belongs to this worker's assignment (no rebalance since
        it was fetched); it is asked under the lock, which a rebalance also takes. A partition whose
        transaction failed because Kafka is away is taken over again and its records merged again, from
        where the group resumes it, until ``retry_for_s`` have passed since the batch's first failure;
        then (after the attempt under way), or at once when fenced, the error goes up."""
        first_failure: float | None = None
        attempt = 0
        while True:
            try:
                return await self._process_once(records, current)
            except (TransactionFailed, KafkaError, OSError) as exc:  # Kafka away: topics, restore, commit
                if getattr(exc, "fatal", False):
                    raise
                now = time.monotonic()
                first_failure = now if first_failure is None else first_failure
                self.kafka_status.commit_failed("batch", exc, now)
                if now - first_failure >= self.retry_for_s:
                    log.critical(
                        "a batch has not committed for %.0f s (worker.outage_timeout_s is %.0f): the worker "
                        "stops; started again, it merges the batch again from the committed offsets",
                        now - first_failure, self.retry_for_s,
                    )  # fmt: skip
                    raise
                delay = min(5.0, 0.5 * 2**attempt)
                attempt += 1
                log.debug("batch not committed (%s); retrying in %.1f s", exc, delay)
                await asyncio.sleep(delay)

    async def _process_once(self, records: Sequence[RawRecord], current: Callable[[], bool]) -> int:
        async with self.lock:
            if not current():
                log.info(
                    "batch of %d records fetched before a rebalance: left to be fetched again", len(records)
                )
                return 0
            started = time.perf_counter()
            assigned = self.partitions.assigned
            by_partition: dict[int, list[RawRecord]] = {}
            for record in records:
                if record.partition in assigned:
                    by_partition.setdefault(record.partition, []).append(record)
            mine = sum(len(rs) for rs in by_partition.values())
            log.debug("batch of %d records, %d of assigned partitions", len(records), mine)
            if not mine:
                return 0
            await self._acquire(self.takeover.pending(set(by_partition)))
            now_ms = int(time.time() * 1000)
            schemas = self._schemas_by_id()
            commits: list[asyncio.Task[None]] = []
            try:
                for partition, recs in by_partition.items():
                    recs = self.takeover.in_line(partition, recs)
                    if recs:
                        w = await self._merge_partition(partition, recs, now_ms, schemas)
                        # its transaction goes out while the next partition merges
                        commits.append(asyncio.ensure_future(self._commit_partition(w)))
                        await asyncio.sleep(0)
            except BaseException:
                # the partitions merged so far commit all the same: each one's share is whole
                await _uncancellable(self._finish(commits, settle_only=True))
                raise
            # once begun, a commit runs to its end even if the task is cancelled meanwhile: the local
            # stores must follow what Kafka committed, or the next batch would merge on stale state
            await _uncancellable(self._finish(commits))
            self.stats.batches.observe(time.perf_counter() - started)
            return mine

    async def _merge_partition(
        self, partition: int, records: list[RawRecord], now_ms: int, schemas: dict[uuid.UUID, TableSchema]
    ) -> PartitionBatch:
        """One partition's records merged in one state transaction, after the expiries due by ``now``."""
        while True:
            w = PartitionBatch(partition, self.partitions.store(partition).transaction())
            try:
                # what expired by now goes out before any event is merged on top of it
                await self._expire_into(w, schemas, now_ms)
                await self._merge_records(w, records, now_ms)
                w.next_offset = records[-1].offset + 1
                return w
            except _MergeAgain as again:
                log.warning(
                    "merging %s[%d]'s share of the batch again: %s", self.topics.raw, partition, again
                )
                await w.abandon()  # and once more, with the event that failed dead-lettered at once
            except BaseException:
                await w.abandon()
                raise

    async def _merge_records(self, w: PartitionBatch, records: list[RawRecord], now_ms: int) -> None:
        """The records of one partition, in offset order: the hot loop of the worker. Two thirds of the
        records are replica copies, dropped after a digest lookup on their heads; of the rest, those of a
        table whose event the native merge took in this transaction are offered to it from their bytes
        (``merge_raw``), and the others, or those it leaves, are decoded (``_decode``)."""
        poison, partition, schemas = self._poison, w.partition, self.schemas
        heads = self._heads([record.value for record in records])
        processor = self.processor
        drop_duplicate, merge_whole, merge_raw = (
            processor.drop_duplicate,
            processor.merge_whole,
            processor.merge_raw,
        )
        txn, tally = w.txn, w.tally
        head: tuple[str, bytes] | None
        for i, record in enumerate(records, 1):
            if i % YIELD_EVERY == 0:
                await asyncio.sleep(0)  # the transactions of the partitions merged before go on
            if poison and (reason := poison.get((partition, record.offset))) is not None:
                decided: _Ready | _NeedsSchema | DeadLetter | None = DeadLetter(record, "merge_error", reason)
                head = None
            else:
                head = heads[i - 1]
                if head is not None:
                    if drop_duplicate(txn, head[0], head[1], tally):
                        continue  # a copy merged before: decided on its head alone, never decoded
                    plain = w.plain.get(head[0]) if w.plain_at == schemas.changes else None
                    if plain is not None:
                        # the table's common event, merged from the record's bytes (never decoded)
                        txn.savepoint()
                        mark, held, sent = tally.mark(), len(w.out), w.sent
                        try:
                            taken = merge_raw(txn, record.value, head[1], plain, now_ms, w.out, tally)
                        except MERGE_ERRORS as exc:
                            if isinstance(exc, StoreError):
                                raise
                            dead = self._undo_event(w, record, plain, exc, mark, held, sent)
                            w.dead.append(dead)
                            tally.dead_letters.append(dead.kind)
                            continue
                        if taken is not None:
                            if len(w.out) >= SEND_EARLY_RECORDS:
                                await self._send_early(w)
                            continue
                decided = self._decode(w, record, head)
            if decided is None:
                continue
            if type(decided) is _NeedsSchema:
                decided = await self._schema_for(decided)
            if type(decided) is _Ready:
                schema, event = decided.schema, decided.event
                if w.drops_shown.get(schema.table_id) is not schema:
                    await self._show_drops(w, schema, now_ms)
                txn, tally = w.txn, w.tally
                txn.savepoint()
                mark, held, sent = tally.mark(), len(w.out), w.sent
                try:
                    # the common event in one native call; the others through the Python merge's steps
                    if merge_whole(txn, event, schema, now_ms, w.out, tally) is None:
                        await self._drive(processor.process(txn, event, schema, now_ms, w.out, tally), w)
                    else:
                        if head is not None and schemas.get(schema.table_id) is schema:
                            # the table's next events in this transaction: straight from their bytes
                            w.remember_plain(head[0], schema, schemas.changes)
                        if len(w.out) >= SEND_EARLY_RECORDS:
                            await self._send_early(w)
                    continue
                except MERGE_ERRORS as exc:
                    if isinstance(exc, StoreError):
                        raise
                    decided = self._undo_event(w, record, decided.schema, exc, mark, held, sent)
            assert isinstance(decided, DeadLetter)
            w.dead.append(decided)
            w.tally.dead_letters.append(decided.kind)

    def _undo_event(
        self,
        w: PartitionBatch,
        record: RawRecord,
        schema: TableSchema,
        exc: Exception,
        mark: TallyMark,
        held: int,
        sent: int,
    ) -> DeadLetter:
        """An event whose merge failed: what it wrote and counted is undone, and it goes to the dead
        letters. When some of its changes were sent early already (they cannot be taken back), the
        partition's share is merged again instead, this event dead-lettered at once (``_MergeAgain``)."""
        reason = (
            f"the merge of raw record {self.topics.raw}[{w.partition}]@{record.offset} into table "
            f"{schema.keyspace}.{schema.table} failed: {type(exc).__name__}: {exc}"
        )
        if w.sent != sent:
            self._poison[(w.partition, record.offset)] = reason
            raise _MergeAgain(reason) from exc
        w.txn.rollback_to_savepoint()
        del w.out[held:]
        w.tally.rewind(mark)
        return DeadLetter(record, "merge_error", reason)

    def _decode(
        self, w: PartitionBatch, record: RawRecord, head: tuple[str, bytes] | None
    ) -> _Ready | _NeedsSchema | DeadLetter | None:
        """What to do with one record that is no copy merged before (``head``: its table and digest as
        the core read them; None: read them with ``peek_raw_event``, which names what is wrong): merge
        it, wait for a schema first (the only part that awaits), dead-letter it, or nothing (a copy)."""
        if record.value is None:
            return DeadLetter(record, "undecodable", "raw record without a value")
        try:
            if head is None:
                peeked = peek_raw_event(record.value)
                table = f"{peeked.keyspace}.{peeked.table}"
                if self.processor.drop_duplicate(w.txn, table, peeked.digest, w.tally):
                    return None
            event = self._read_event(record.value)
        except RawEventError as exc:
            return DeadLetter(record, "undecodable", str(exc))
        table_id = self._table_ids.get(event["table_id"])
        if table_id is None:
            table_id = self._table_ids[event["table_id"]] = uuid.UUID(event["table_id"])
        schema = self.schemas.get(table_id)
        prepared = self._prepared.get(table_id)
        if schema is None or prepared is None or schema is not prepared.schema or prepared.unplaced(event):
            return _NeedsSchema(record, table_id, event)
        return _Ready(event, schema)

    async def _schema_for(self, pending: _NeedsSchema) -> _Ready | DeadLetter:
        """Wait for a schema of the event's table that has every column the event writes (and prepare
        the codec for it); a dead letter naming the table (and the columns) when none comes in time."""
        table_id, event = pending.table_id, pending.event
        schema = self.schemas.get(table_id)
        if schema is None or unplaced_columns(event, schema):
            schema = await self.schemas.wait_for(
                table_id, SCHEMA_WAIT_S, lambda found: not unplaced_columns(event, found)
            )
        if schema is None:
            return self._no_schema(pending)
        prepared = self._prepared.get(table_id)
        if prepared is None or prepared.schema is not schema:
            await self.processor.codec.prepare(schema)  # registry calls happen here, off the event loop
            self._prepared[table_id] = EventColumns(schema)
        return _Ready(event, schema)

    def _no_schema(self, pending: _NeedsSchema) -> DeadLetter:
        """Why an event waited for its schema in vain: no schema of its table at all, or none with the
        columns it writes."""
        event, table_id = pending.event, pending.table_id
        name = f"{event['keyspace']}.{event['table']} ({table_id})"
        known = self.schemas.get(table_id)
        if known is None:
            return DeadLetter(
                pending.record,
                "unknown_table",
                f"no schema for table {name} on the schema topic {self.schemas.topic} after {SCHEMA_WAIT_S:.0f} s",
            )
        return DeadLetter(
            pending.record,
            "unknown_column",
            f"the raw event writes column(s) {', '.join(unplaced_columns(event, known))} that the newest schema "
            f"of table {name} on the schema topic {self.schemas.topic} does not have, after {SCHEMA_WAIT_S:.0f} s "
            "of waiting for one that has them (a column added by ALTER TABLE ... ADD whose schema never came)",
        )

    async def _show_drops(self, w: PartitionBatch, schema: TableSchema, now_ms: int) -> None:
        """Before a partition's events or expiries meet a new version of a table's schema: a delete for
        each stored row that lived only by a column it dropped (``ChangeProcessor.show_drops``), in this
        transaction, so consumers see the row go before any change computed without the column."""
        table_id = schema.table_id
        if w.drops_shown.get(table_id) is schema:
            return
        if self._drops_shown.get(w.partition, {}).get(table_id) is not schema:
            before = self.processor.drops_to_show(w.txn, schema)
            if before is not None:
                await self.processor.codec.prepare(before)  # the deletes show the columns as they were
                await self._drive(self.processor.show_drops(w.txn, before, schema, now_ms, w.out, w.tally), w)
        w.drops_shown[table_id] = schema

    async def _drive(self, steps: Generator[None, None, T], w: PartitionBatch) -> T:
        """Run a processor step to its end, sending ``w.out`` on whenever it holds SEND_EARLY_RECORDS."""
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            if len(w.out) >= SEND_EARLY_RECORDS:
                await self._send_early(w)

    async def _send_early(self, w: PartitionBatch) -> None:
        """Send the partition's change records so far in its transaction (begun here if need be)."""
        await self._ensure_clean_topics({r.topic for r in w.out})
        try:
            if w.tx is None:
                w.tx = await self.producers.sink(w.partition).begin()
            await w.tx.send_all((clean.topic, clean.key, clean.value, None, ()) for clean in w.out)
        except (TransactionFailed, KafkaError, OSError):
            self.stats.transactions_failed.inc()
            w.tx = None  # aborted by the failed send; the partition is taken over again
            await w.abandon()
            await self.takeover.forget(w.partition)
            raise
        self.stats.sent_early.inc(len(w.out))
        w.sent += len(w.out)
        w.out.clear()

    def _schemas_by_id(self) -> dict[uuid.UUID, TableSchema]:
        return {s.table_id: s for s in self.schemas.tables()}

    # -- the passing of time

    async def _expire_into(
        self, w: PartitionBatch, schemas: dict[uuid.UUID, TableSchema], now_ms: int
    ) -> int:
        """The expiry pass over one raw partition's store, into ``w``. A stored partition whose expiry
        fails is remembered and ``_MergeAgain`` raised (what was sent of the pass cannot be taken back):
        the next attempt sets it aside, for the dead-letter topic."""
        partition = w.partition
        for schema in schemas.values():
            await self._show_drops(w, schema, now_ms)
        set_aside = {(t, k): why for (p, t, k), why in self._expiry_poison.items() if p == partition}
        try:
            looked = await self._drive(
                self.processor.expire(
                    w.txn, schemas, now_ms, w.out, tally=w.tally, set_aside=set_aside, aside=w.expiries_aside
                ),
                w,
            )
        except ExpiryFailed as failed:
            self._expiry_poison[(partition, *failed.key)] = failed.reason
            raise _MergeAgain(failed.reason) from failed
        w.tally.dead_letters.extend("expiry_error" for _ in w.expiries_aside)
        return looked

    async def expire(self) -> int:
        """Emit what expired since the last look, and forget old digests; one transaction per partition
        with something to commit. Nothing while Kafka does not answer, or while a batch under way retries
        a commit that failed: nothing could commit (that batch's merge, or the first tick after Kafka is
        back, emits what expired meanwhile), and the tick would only wait for the batch."""
        if not await self._lock_for_expiry():
            return 0
        try:
            return await self._expire_locked()
        finally:
            self.lock.release()

    async def _lock_for_expiry(self) -> bool:
        """Take the lock for an expiry tick (True), or give the tick up (False) as soon as Kafka does not
        answer or the batch holding the lock meets failed commits."""
        while True:
            status = self.kafka_status
            if not status.reachable or (self.lock.locked() and not status.committing):
                return False
            try:
                await asyncio.wait_for(self.lock.acquire(), LOCK_LOOK_EVERY_S)
                return True
            except TimeoutError:
                continue

    async def _expire_locked(self) -> int:
        await self._acquire(self.takeover.pending(self.partitions.assigned))
        stores = self.partitions.ready
        if not stores:
            return 0
        now_ms = int(time.time() * 1000)
        forget = time.monotonic() - self._last_digest_expiry >= DIGEST_EXPIRY_EVERY_S
        work: list[PartitionBatch] = []
        looked = 0
        schemas = self._schemas_by_id()
        try:
            for partition, store in stores.items():
                w = PartitionBatch(partition, store.transaction())
                work.append(w)
                while True:
                    try:
                        looked += await self._expire_into(w, schemas, now_ms)
                        break
                    except _MergeAgain as again:
                        log.warning("expiring %s[%d] again: %s", self.topics.raw, partition, again)
                        await w.abandon()
                        work[-1] = w = PartitionBatch(partition, store.transaction())
                if forget:
                    w.tally.digests_expired += w.txn.expire_digests(now_ms - self.digest_horizon_ms, 100_000)
        except BaseException:
            for w in work:
                await w.abandon()
            raise
        changed: list[PartitionBatch] = []
        for w in work:
            if w.tx is not None or w.out or w.txn.changelog():
                changed.append(w)
            else:
                w.txn.rollback()  # it wrote nothing: what it found shown is what the store holds
                self._drops_shown.setdefault(w.partition, {}).update(w.drops_shown)
        if changed:
            commits = [asyncio.ensure_future(self._commit_partition(w)) for w in changed]
            await _uncancellable(self._finish(commits))
        if forget:
            self._last_digest_expiry = time.monotonic()
        return looked

    # -- committing

    async def _finish(self, commits: list[asyncio.Task[None]], *, settle_only: bool = False) -> None:
        """Wait for the partitions' commits (each handled its own outcome); then, unless ``settle_only``,
        the heartbeat if one is due, and the first error (a fatal one first)."""
        if commits:
            await asyncio.wait(commits)
        errors = [e for c in commits if (e := c.exception()) is not None]
        if settle_only:
            for error in errors:
                log.warning("a partition's transaction failed while the batch stopped: %r", error)
            return
        if not errors:
            await self._beat_if_due()
            return
        raise next((e for e in errors if getattr(e, "fatal", False)), errors[0])

    def _counted(self, tally: BatchTally, offsets: dict[int, int]) -> None:
        """What committed transactions did, into the stats and the lag figures."""
        self.kafka_status.committed(time.monotonic())
        self.stats.add(tally)
        committed_at = time.time()
        self.stats.last_commit_time.set(committed_at)
        self.lag.on_commit(offsets, tally.newest_write_us, int(committed_at * 1000))

    async def _commit_partition(self, w: PartitionBatch) -> None:
        """One partition's share in its own transaction; the store follows what Kafka did with it. A
        failure leaves the store untouched and the partition to be taken over again (unless fenced)."""
        partition = w.partition
        offsets = {} if w.next_offset is None else {TopicPartition(self.topics.raw, partition): w.next_offset}
        tx, w.tx = w.tx, None
        try:
            await self._ensure_clean_topics({r.topic for r in w.out})
            if tx is None:
                tx = await self.producers.sink(partition).begin()
            for dead in w.dead:
                log.error(
                    "raw record %s[%d]@%d dead-lettered to %s: %s",
                    self.topics.raw, partition, dead.record.offset, self.topics.dead_letter, dead.reason,
                )  # fmt: skip
            for aside in w.expiries_aside:
                log.error("expiry set aside, reported to %s: %s", self.topics.dead_letter, aside.reason)
            await tx.send_all(self._records(w))
            await tx.send_to(self.topics.changelog, partition, w.txn.changelog())
            written = await tx.commit(offsets, self.topics.group_id)
        except BaseException as exc:
            if isinstance(exc, TransactionFailed | KafkaError | OSError):
                self.stats.transactions_failed.inc()
            if tx is not None and not isinstance(exc, TransactionFailed):  # a TransactionFailed aborted it
                await tx.abort()
            w.txn.rollback()
            self._drops_shown.pop(partition, None)
            if not getattr(exc, "fatal", False):
                doubt = None
                if isinstance(exc, TransactionInDoubt) and w.next_offset is not None:
                    doubt = InDoubt(w.next_offset, w.tally)
                await self.takeover.forget(partition, doubt)
            raise
        store = self.partitions.store(partition)
        changelog_next = written.get(TopicPartition(self.topics.changelog, partition), store.changelog_offset)
        consumed = w.next_offset if w.next_offset is not None else self.takeover.position(partition)
        w.txn.commit(consumed, changelog_next)
        if w.next_offset is not None:
            self.takeover.committed(partition, w.next_offset)
            for key in [k for k in self._poison if k[0] == partition and k[1] < w.next_offset]:
                del self._poison[key]
        for aside in w.expiries_aside:  # their due entries are gone with this commit
            self._expiry_poison.pop((partition, aside.table_id, aside.partition_key), None)
        self._drops_shown.setdefault(partition, {}).update(w.drops_shown)
        self._counted(w.tally, {} if w.next_offset is None else {partition: w.next_offset})

    def _records(self, w: PartitionBatch) -> Iterator[Outgoing]:
        """A partition's transaction but its state changelog (``send_to``): change events, dead letters."""
        raw = self.topics.raw.encode()
        return chain(
            ((clean.topic, clean.key, clean.value, None, ()) for clean in w.out),
            (
                (
                    self.topics.dead_letter,
                    dead.record.key,
                    dead.record.value,
                    None,
                    (
                        (REASON_HEADER, dead.reason.encode()),
                        (KIND_HEADER, dead.kind.encode()),
                        (TOPIC_HEADER, raw),
                        (PARTITION_HEADER, str(w.partition).encode()),
                        (OFFSET_HEADER, str(dead.record.offset).encode()),
                    ),
                )
                for dead in w.dead
            ),
            (
                (
                    self.topics.dead_letter,
                    aside.partition_key,
                    json.dumps(aside.as_dict()).encode(),
                    None,
                    (
                        (REASON_HEADER, aside.reason.encode()),
                        (KIND_HEADER, b"expiry_error"),
                        (TOPIC_HEADER, raw),
                        (PARTITION_HEADER, str(w.partition).encode()),
                    ),
                )
                for aside in w.expiries_aside
            ),
        )

    # -- heartbeats

    def heartbeat_wait_s(self) -> float:
        """Seconds until a heartbeat is due (heartbeats must be on)."""
        assert self.heartbeat is not None
        return self.heartbeat.wait_s(time.monotonic())

    async def beat(self) -> bool:
        """Commit a heartbeat if one is due (a batch that committed since carried one otherwise); whether
        it did. Waits for a batch in flight, as expiries do: a worker stuck in a batch writes none."""
        if self.heartbeat is None:
            return False
        async with self.lock:
            if not self.heartbeat.due(time.monotonic()):
                return False
            await _uncancellable(self._commit_heartbeat())
            return True

    async def _beat_if_due(self) -> None:
        """After a batch's transactions: the heartbeat, if one is due. Only a fence stops the batch."""
        if self.heartbeat is None or not self.heartbeat.due(time.monotonic()):
            return
        try:
            await self._commit_heartbeat()
        except (TransactionFailed, KafkaError, OSError) as exc:
            if getattr(exc, "fatal", False):
                raise
            self.kafka_status.commit_failed("heartbeat", exc, time.monotonic())  # the next one tries again

    async def _commit_heartbeat(self) -> None:
        """One transaction holding a heartbeat that describes what is committed now. It carries no state,
        so a failed one is simply tried again (with a new producer) at the next one."""
        heartbeat, sink = self.heartbeat, self.heartbeat_sink
        assert heartbeat is not None and sink is not None, "heartbeats need their producer"
        made_s = time.monotonic()
        now_ms = int(time.time() * 1000)
        record: Outgoing = (
            heartbeat.topic,
            heartbeat.key,
            heartbeat.value(self.lag.figures(now_ms), now_ms),
            None,
            (),
        )
        try:
            if self._heartbeat_broken or not sink.started:
                await sink.restart()
                self._heartbeat_broken = False
            tx = await sink.begin()
            await tx.send_all([record])
            await tx.commit({}, self.topics.group_id)
        except (TransactionFailed, KafkaError, OSError) as exc:
            self.stats.transactions_failed.inc()
            self._heartbeat_broken = not getattr(exc, "fatal", False)
            raise
        heartbeat.committed(made_s)
        self.kafka_status.committed(time.monotonic())
        self.stats.heartbeat_committed()

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

"""One transactional producer, and the Kafka transactions it runs: records, consumed offsets, commit.

Either all of a transaction becomes visible to read_committed consumers, with its raw offsets committed
for the consumer group, or none of it does. Faust's own exactly-once mode does not cover the worker: its
topic sends bypass the transactional producers, so the worker owns its producers (see
app/partition_producers.py for which transactional ids they use, and why one per raw partition).

A failed transaction is reported in one of three ways, because each calls for another reaction:

- fenced (``TransactionFailed``, fatal): another producer registered the same transactional id, so
  another worker owns what this transaction was for; this worker must stop, not retry;
- not committed (``TransactionFailed``): the failure came before the commit was asked for; the
  transaction is aborted, nothing of it will ever show;
- in doubt (``TransactionInDoubt``): the commit was asked for and no answer came; the coordinator may have
  committed it. Only a new registration of the transactional id settles it (see app/batch_loop.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import IllegalOperation, InvalidProducerEpoch, KafkaError, ProducerFenced
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.structs import RecordMetadata

from app.errors import TransactionFailed, TransactionInDoubt
from runtime.config import KafkaConfig
from runtime.kafka_clients import make_producer, start_kafka_client, stop_client
from runtime.key_partition import key_partitions

log = logging.getLogger(__name__)

T = TypeVar("T")

#: after a step timed out, how long an answer already on its way may still end it: a process that was
#: paused (SIGSTOP, a long stall) sees its timers fire before it reads the answers waiting in its sockets,
#: and a fence must be seen as a fence, not taken for a timeout
ANSWER_GRACE_S = 1.0
#: the failures a Kafka step may end with (aiokafka asserts on its fatal states)
_STEP_ERRORS = (KafkaError, OSError, AssertionError, IllegalOperation, TimeoutError)

#: Kafka record headers: (name, value) pairs
Headers = Sequence[tuple[str, bytes]]
#: what a record without headers is built with (aiokafka's batch builder wants a list; never mutated)
_NO_HEADERS: list[tuple[str, bytes]] = []
#: one record to write: topic, key, value, its partition (None: the key's partition, chosen as Kafka's
#: default partitioner chooses it, so a key always lands where other clients would put it; partition 0
#: for a record without a key) and its headers
Outgoing = tuple[str, bytes | None, bytes | None, int | None, Headers]


def _fenced(transactional_id: str) -> TransactionFailed:
    return TransactionFailed(
        f"transactional id {transactional_id} was registered by another producer: another worker owns "
        "what it was for; this one stops",
        fatal=True,
    )


@dataclass(slots=True)
class OpenTransaction:
    """Records sent so far in the current transaction; ``commit`` makes them visible together.

    Records go out as one prebuilt record batch per topic partition: a ``send`` per record costs a
    future, a metadata lookup and a partitioner call each, about four times the CPU of a batch."""

    producer: AIOKafkaProducer
    transactional_id: str
    #: no step may wait longer: aiokafka waits for a lost coordinator without a deadline
    timeout_s: float
    #: each sent batch's delivery, and how many records it holds
    pending: list[tuple[asyncio.Future[RecordMetadata], int]] = field(default_factory=list)
    records: int = 0

    async def send_all(self, records: Iterable[Outgoing]) -> None:
        await self._sending(self._send_all(records))

    async def send_to(
        self, topic: str, partition: int, records: Iterable[tuple[bytes, bytes | None]]
    ) -> None:
        """``send_all`` for records of one topic partition without headers (key, value each), appended
        as they come: the worker's changelog, two records of three it writes per merged event."""
        await self._sending(self._append_all(topic, partition, records))

    async def _sending(self, sends: Awaitable[None]) -> None:
        try:
            await self._step(sends)
        except TimeoutError as exc:
            raise TransactionFailed(
                f"sending {self.records} records in transaction {self.transactional_id} waited over "
                f"{self.timeout_s:.0f} s"
            ) from exc
        except _STEP_ERRORS as exc:
            if self._fence_seen(exc):
                raise _fenced(self.transactional_id) from exc
            # the producer's sender routine failed (a broker restart) and left the transaction in a fatal
            # state: aiokafka then refuses sends "while not in transaction"; a new producer retries it
            await self._abort_quietly()
            raise TransactionFailed(
                f"a send failed inside transaction {self.transactional_id}: {exc!r}"
            ) from exc

    async def _send_all(self, records: Iterable[Outgoing]) -> None:
        records = list(records)
        keyed: dict[str, tuple[list[int], list[bytes]]] = {}  # topic -> records partitioned by key
        for i, (topic, key, _, partition, _) in enumerate(records):
            if partition is None and key is not None:
                indexes, keys = keyed.setdefault(topic, ([], []))
                indexes.append(i)
                keys.append(key)
        chosen: dict[int, int] = {}
        for topic, (indexes, keys) in keyed.items():
            partitions = len(await self.producer.partitions_for(topic))
            chosen.update(zip(indexes, key_partitions(keys, partitions), strict=True))
        by_partition: dict[tuple[str, int], list[tuple[bytes | None, bytes | None, Headers]]] = {}
        for i, (topic, key, value, partition, headers) in enumerate(records):
            if partition is None:
                partition = chosen.get(i, 0)
            by_partition.setdefault((topic, partition), []).append((key, value, headers))
        for (topic, partition), items in by_partition.items():
            batch, count = self.producer.create_batch(), 0
            for key, value, headers in items:
                if headers or batch.append(key=key, value=value, timestamp=None, headers=_NO_HEADERS) is None:
                    batch, count = await self._append(batch, count, topic, partition, key, value, headers)
                else:
                    count += 1
            await self._send_batch(batch, topic, partition, count)

    async def _append_all(
        self, topic: str, partition: int, records: Iterable[tuple[bytes, bytes | None]]
    ) -> None:
        batch, count = self.producer.create_batch(), 0
        for key, value in records:
            if batch.append(key=key, value=value, timestamp=None, headers=_NO_HEADERS) is None:
                batch, count = await self._append(batch, count, topic, partition, key, value, ())
            else:
                count += 1
        if count:
            await self._send_batch(batch, topic, partition, count)

    async def _append(
        self,
        batch: BatchBuilder,
        count: int,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
    ) -> tuple[BatchBuilder, int]:
        """Append one record to ``batch`` (the callers append a record without headers themselves and
        come here when it did not fit), or send the full batch and start the next with it: the batch
        being filled and its count."""
        listed = list(headers) if headers else _NO_HEADERS
        if batch.append(key=key, value=value, timestamp=None, headers=listed) is None:  # full
            await self._send_batch(batch, topic, partition, count)
            batch, count = self.producer.create_batch(), 0
            if batch.append(key=key, value=value, timestamp=None, headers=listed) is None:
                raise TransactionFailed(
                    f"a record of {len(value or b'')} bytes for {topic} does not fit a record batch"
                )
        return batch, count + 1

    async def _send_batch(self, batch: BatchBuilder, topic: str, partition: int, count: int) -> None:
        delivered = await self.producer.send_batch(batch, topic, partition=partition)
        self.pending.append((delivered, count))
        self.records += count

    async def commit(self, offsets: Mapping[TopicPartition, int], group_id: str) -> dict[TopicPartition, int]:
        """Commit; return the next offset after the last record written to each topic partition.

        Raises TransactionFailed (fatal when fenced) when the transaction did not commit, and
        TransactionInDoubt when its commit was asked for but not answered."""
        try:
            written = await self._step(self._deliver(offsets, group_id))
        except _STEP_ERRORS as exc:
            if self._fence_seen(exc):
                raise _fenced(self.transactional_id) from exc
            await self._abort_quietly()
            raise TransactionFailed(
                f"transaction of {self.records} records ({self.transactional_id}) did not commit: {exc!r}"
            ) from exc
        try:
            await self._step(self.producer.commit_transaction())
        except _STEP_ERRORS as exc:
            if self._fence_seen(exc):
                raise _fenced(self.transactional_id) from exc
            raise TransactionInDoubt(
                f"the commit of transaction {self.transactional_id} ({self.records} records) was asked for "
                f"and not answered ({exc!r}): it may have committed"
            ) from exc
        next_offsets: dict[TopicPartition, int] = {}
        for meta, count in written:  # a batch's metadata holds the offset of its first record
            tp = TopicPartition(meta.topic, meta.partition)
            next_offsets[tp] = max(next_offsets.get(tp, 0), meta.offset + count)
        return next_offsets

    async def _deliver(
        self, offsets: Mapping[TopicPartition, int], group_id: str
    ) -> list[tuple[RecordMetadata, int]]:
        """Everything before the commit itself: every record acknowledged, then the offsets.

        In that order, not overlapping: a broker of Kafka 3.6 or later checks with the transaction
        coordinator that a transactional record's partition was added to the transaction (KIP-890), and
        while the coordinator is busy adding the offsets to the same transaction it answers that check
        with CONCURRENT_TRANSACTIONS, which the broker hands to the producer as NOT_ENOUGH_REPLICAS: the
        records are sent again after a 100 ms backoff (aiokafka logs each as a warning). In order, the
        offsets' two round trips are no longer hidden behind the records' own; a batch's commits still
        overlap each other and the next partition's merge, and bench/transaction_scheme.md measured no
        difference in a batch's wall time."""
        written = await asyncio.gather(*(delivered for delivered, _ in self.pending))
        if offsets:
            await self.producer.send_offsets_to_transaction(dict(offsets), group_id)
        return list(zip(written, (count for _, count in self.pending), strict=True))

    async def _step(self, work: Awaitable[T]) -> T:
        """``work`` within the step timeout (and ANSWER_GRACE_S more); TimeoutError after that."""
        task = asyncio.ensure_future(work)
        try:
            done, _ = await asyncio.wait({task}, timeout=self.timeout_s)
            if not done:
                done, _ = await asyncio.wait({task}, timeout=ANSWER_GRACE_S)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not done:
            task.cancel()
            raise TimeoutError(
                f"a step of transaction {self.transactional_id} took over {self.timeout_s:.0f} s"
            )
        return task.result()

    def _fence_seen(self, exc: BaseException) -> bool:
        """Whether the producer met a fence: raised here, or met first by aiokafka's sender (in the
        background, while adding a partition to the transaction), which then fails every pending
        delivery with it and refuses the next call with IllegalOperation ("not in transaction")."""
        if isinstance(exc, ProducerFenced | InvalidProducerEpoch):
            return True
        return any(
            delivered.done()
            and not delivered.cancelled()
            and isinstance(delivered.exception(), ProducerFenced | InvalidProducerEpoch)
            for delivered, _ in self.pending
        )

    async def abort(self) -> None:
        await self._abort_quietly()

    async def _abort_quietly(self) -> None:
        for delivered, _ in self.pending:
            delivered.cancel()
        try:
            await asyncio.wait_for(self.producer.abort_transaction(), self.timeout_s)
        except Exception as exc:  # the producer may be in a fatal state; it is replaced anyway
            log.warning(
                "abort of transaction %s failed (%r); the broker aborts it on timeout, or when the id is "
                "registered again",
                self.transactional_id,
                exc,
            )


class TransactionalSink:
    """One transactional producer (servers, timeouts and security from ``kafka``)."""

    def __init__(self, kafka: KafkaConfig, transactional_id: str, *, transaction_timeout_ms: int) -> None:
        self.kafka = kafka
        self.transactional_id = transactional_id
        self._settings: dict[str, Any] = {
            "transactional_id": transactional_id,
            "transaction_timeout_ms": transaction_timeout_ms,
            "enable_idempotence": True,
            "acks": "all",
            "linger_ms": 0,  # records go out as whole prebuilt batches: waiting for more adds nothing
            "max_batch_size": 256 * 1024,
        }
        self._producer: AIOKafkaProducer | None = None
        self.timeout_s = max(10.0, transaction_timeout_ms / 1000)

    @property
    def started(self) -> bool:
        return self._producer is not None

    async def start(self) -> None:
        """Connect and register the transactional id. Registering fences every earlier producer with the
        same id, and makes the coordinator finish the transaction it left: committed if its commit had
        been asked for, aborted otherwise."""
        producer = make_producer(self.kafka, **self._settings)
        try:
            # KafkaAccessError (from KafkaConnectionError) names the kafka.security key to fix
            await asyncio.wait_for(start_kafka_client(producer, self.kafka), self.timeout_s * 3)
        except BaseException:
            await stop_client(producer, f"the transactional producer {self.transactional_id}")
            raise
        self._producer = producer

    async def restart(self) -> None:
        """A fresh producer with the same transactional id, whatever state a failure left the old one in."""
        await self.stop()
        await self.start()

    async def begin(self) -> OpenTransaction:
        if self._producer is None:
            raise TransactionFailed(f"the transactional producer {self.transactional_id} is not started")
        try:
            await asyncio.wait_for(self._producer.begin_transaction(), self.timeout_s)
        except _STEP_ERRORS as exc:
            raise TransactionFailed(f"cannot begin a transaction ({self.transactional_id}): {exc!r}") from exc
        return OpenTransaction(self._producer, self.transactional_id, self.timeout_s)

    async def stop(self) -> None:
        """Stop the producer within runtime.kafka_clients.STOP_TIMEOUT_S: with Kafka away, aiokafka's own
        stop would wait for the transaction coordinator until Kafka is back (a commit in doubt, an abort),
        and the batch loop with it."""
        producer, self._producer = self._producer, None
        if producer is not None:
            await stop_client(producer, f"the transactional producer {self.transactional_id}")

"""One Kafka transaction per batch: state changelog records, clean events and the consumed offsets.

Either all of a batch becomes visible to read_committed consumers, with the raw offsets committed for
the consumer group, or none of it does: a crash between them can neither lose a clean event (state saved,
event not sent) nor repeat one (event sent, state not saved). Faust's own exactly-once mode does not
cover this: its topic sends bypass the transactional producers, so the worker owns its producer.

The transactional id is the worker's stable name, so a restarted worker fences its predecessor and
aborts the transaction it left open at once (a worker with a new name waits for the broker's
transaction timeout instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import IllegalOperation, KafkaError, ProducerFenced
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.structs import RecordMetadata

from app.errors import TransactionFailed
from app.key_partition import key_partitions
from runtime.config import KafkaConfig
from runtime.kafka_clients import make_producer, start_kafka_client

log = logging.getLogger(__name__)


def _fenced(transactional_id: str) -> TransactionFailed:
    return TransactionFailed(
        f"transactional id {transactional_id} was taken over by another worker; this one stops", fatal=True
    )


#: one record to write: topic, key, value, and its partition (None: the key's partition, chosen as Kafka's
#: default partitioner chooses it, so a key always lands where other clients would put it; partition 0
#: for a record without a key)
Outgoing = tuple[str, bytes | None, bytes | None, int | None]


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
        try:
            await asyncio.wait_for(self._send_all(records), self.timeout_s)
        except TimeoutError as exc:
            raise TransactionFailed(
                f"sending {self.records} records in transaction {self.transactional_id} waited over "
                f"{self.timeout_s:.0f} s"
            ) from exc
        except ProducerFenced as exc:
            raise _fenced(self.transactional_id) from exc
        except (KafkaError, IllegalOperation, AssertionError) as exc:
            # the producer's sender routine failed (a broker restart) and left the transaction in a fatal
            # state: aiokafka then refuses sends "while not in transaction"; a new producer retries it
            await self._abort_quietly()
            raise TransactionFailed(
                f"a send failed inside transaction {self.transactional_id}: {exc!r}"
            ) from exc

    async def _send_all(self, records: Iterable[Outgoing]) -> None:
        records = list(records)
        keyed: dict[str, tuple[list[int], list[bytes]]] = {}  # topic -> records partitioned by key
        for i, (topic, key, _, partition) in enumerate(records):
            if partition is None and key is not None:
                indexes, keys = keyed.setdefault(topic, ([], []))
                indexes.append(i)
                keys.append(key)
        chosen: dict[int, int] = {}
        for topic, (indexes, keys) in keyed.items():
            partitions = len(await self.producer.partitions_for(topic))
            chosen.update(zip(indexes, key_partitions(keys, partitions), strict=True))
        by_partition: dict[tuple[str, int], list[tuple[bytes | None, bytes | None]]] = {}
        for i, (topic, key, value, partition) in enumerate(records):
            if partition is None:
                partition = chosen.get(i, 0)
            by_partition.setdefault((topic, partition), []).append((key, value))
        for (topic, partition), items in by_partition.items():
            batch, count = self.producer.create_batch(), 0
            for key, value in items:
                if batch.append(key=key, value=value, timestamp=None) is None:  # full: send, start another
                    await self._send_batch(batch, topic, partition, count)
                    batch, count = self.producer.create_batch(), 0
                    if batch.append(key=key, value=value, timestamp=None) is None:
                        raise TransactionFailed(
                            f"a record of {len(value or b'')} bytes for {topic} does not fit a record batch"
                        )
                count += 1
            await self._send_batch(batch, topic, partition, count)

    async def _send_batch(self, batch: BatchBuilder, topic: str, partition: int, count: int) -> None:
        delivered = await self.producer.send_batch(batch, topic, partition=partition)
        self.pending.append((delivered, count))
        self.records += count

    async def commit(self, offsets: Mapping[TopicPartition, int], group_id: str) -> dict[TopicPartition, int]:
        """Commit; return the next offset after the last record written to each topic partition."""
        try:
            written = await asyncio.wait_for(self._finish(offsets, group_id), self.timeout_s)
        except ProducerFenced as exc:
            raise _fenced(self.transactional_id) from exc
        except (KafkaError, OSError, AssertionError, IllegalOperation, TimeoutError) as exc:  # fatal states
            await self._abort_quietly()
            raise TransactionFailed(
                f"transaction of {self.records} records ({self.transactional_id}) did not commit: {exc!r}"
            ) from exc
        next_offsets: dict[TopicPartition, int] = {}
        for meta, count in written:  # a batch's metadata holds the offset of its first record
            tp = TopicPartition(meta.topic, meta.partition)
            next_offsets[tp] = max(next_offsets.get(tp, 0), meta.offset + count)
        return next_offsets

    async def _finish(
        self, offsets: Mapping[TopicPartition, int], group_id: str
    ) -> list[tuple[RecordMetadata, int]]:
        # the offsets' two coordinator round trips overlap the produce requests still in flight
        if offsets:
            await self.producer.send_offsets_to_transaction(dict(offsets), group_id)
        written = await asyncio.gather(*(delivered for delivered, _ in self.pending))
        await self.producer.commit_transaction()
        return list(zip(written, (count for _, count in self.pending), strict=True))

    async def abort(self) -> None:
        await self._abort_quietly()

    async def _abort_quietly(self) -> None:
        for delivered, _ in self.pending:
            delivered.cancel()
        try:
            await asyncio.wait_for(self.producer.abort_transaction(), self.timeout_s)
        except Exception as exc:  # the producer may be in a fatal state; it is replaced anyway
            log.warning(
                "abort of transaction %s failed (%r); the broker aborts it on timeout",
                self.transactional_id,
                exc,
            )


class TransactionalSink:
    """The worker's transactional producer (servers, timeouts and security from ``kafka``)."""

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

    async def start(self) -> None:
        """Connect and register the transactional id (which fences an earlier producer with the same id)."""
        producer = make_producer(self.kafka, **self._settings)
        try:
            # KafkaAccessError (from KafkaConnectionError) names the kafka.security key to fix
            await asyncio.wait_for(start_kafka_client(producer, self.kafka), self.timeout_s * 3)
        except BaseException:
            with contextlib.suppress(Exception):
                await producer.stop()
            raise
        self._producer = producer

    async def restart(self) -> None:
        """A fresh producer with the same transactional id: registering it aborts whatever transaction the
        old one left open, whatever state a failed commit left it in."""
        old, self._producer = self._producer, None
        if old is not None:
            with contextlib.suppress(Exception):
                await old.stop()
        await self.start()

    async def begin(self) -> OpenTransaction:
        if self._producer is None:
            raise TransactionFailed(f"the transactional producer {self.transactional_id} is not started")
        try:
            await asyncio.wait_for(self._producer.begin_transaction(), self.timeout_s)
        except (KafkaError, OSError, AssertionError, IllegalOperation, TimeoutError) as exc:
            raise TransactionFailed(f"cannot begin a transaction ({self.transactional_id}): {exc!r}") from exc
        return OpenTransaction(self._producer, self.transactional_id, self.timeout_s)

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

"""The raw topic, read in whole batches by a group-managed consumer.

Faust's stream path wraps every record in an Event, queues it, and acknowledges it one by one: about
half a worker's CPU at three replica copies per change, most of them dropped on their digest after a
few microseconds of real work. The worker's one consumer therefore reads the raw topic with
``getmany`` and hands lists of records to the batch loop. Its offsets are committed only inside the
batch's Kafka transaction (``enable_auto_commit`` is off), so the group's position never runs ahead of
what was merged and emitted.

A rebalance bumps ``generation``; a batch fetched in an earlier generation is dropped unmerged (the
consumer fetches it again from the committed offsets), so a batch can never be merged on a partition
this worker lost and got back in between. aiokafka reads a new partition's committed offset before the
worker has registered the partition's transactional id (which finishes the previous owner's last
transaction), so the batch loop reads it again after that and moves the consumer there (``seek``); it
merges only records that continue exactly where the group resumes each partition.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from itertools import chain
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, ConsumerRecord, TopicPartition
from aiokafka.errors import IllegalStateError

from app.errors import WorkerError
from runtime.config import KafkaConfig
from runtime.kafka_clients import make_consumer, start_kafka_client, stop_client

log = logging.getLogger(__name__)

PartitionsCallback = Callable[[set[int]], Awaitable[None]]
#: how long the raw consumer may take to leave its group when it stops
LEAVE_TIMEOUT_S = 15.0


class RawRecord(Protocol):
    """What the batch loop needs of a consumed message (aiokafka's ConsumerRecord, as fetched)."""

    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


@dataclass(slots=True, frozen=True)
class RawBatch:
    """Records fetched together, and the assignment generation they were fetched in."""

    generation: int
    records: list[RawRecord]


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, consumer: RawConsumer) -> None:
        self.consumer = consumer

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        self.consumer.generation += 1
        partitions = {tp.partition for tp in revoked if tp.topic == self.consumer.topic}
        if partitions:
            await self.consumer.on_revoked(partitions)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self.consumer.generation += 1
        await self.consumer.on_assigned({tp.partition for tp in assigned if tp.topic == self.consumer.topic})


class RawConsumer:
    """Batches of the raw topic for one member of the worker group.

    ``on_revoked`` runs before the group rebalances (a batch in flight must commit first, so it waits
    for the batch loop's lock); ``on_assigned`` after, with the partitions this worker now owns."""

    def __init__(
        self,
        *,
        kafka: KafkaConfig,
        topic: str,
        group_id: str,
        batch_max_events: int,
        batch_max_wait_ms: int,
        session_timeout_ms: int,
        on_assigned: PartitionsCallback,
        on_revoked: PartitionsCallback,
    ) -> None:
        self.kafka = kafka
        self.topic = topic
        self.batch_max_events = batch_max_events
        self.batch_max_wait_ms = batch_max_wait_ms
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.generation = 0
        self._consumer: AIOKafkaConsumer | None = None
        self._settings: dict[str, Any] = dict(
            group_id=group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=min(3000, session_timeout_ms // 5),
            request_timeout_ms=max(kafka.request_timeout_ms, session_timeout_ms + 5000),
            max_poll_records=batch_max_events,
            # a batch is merged and committed between two getmany calls: a few seconds at most, but a
            # broker restart can hold a commit for RETRY_FOR_S; the member must not be evicted meanwhile
            max_poll_interval_ms=600_000,
            # what is fetched ahead of the merge stays in memory: enough for a few batches, no more
            fetch_max_bytes=16 * 1024 * 1024,
            max_partition_fetch_bytes=1024 * 1024,
        )

    async def start(self) -> None:
        consumer = make_consumer(self.kafka, **self._settings)  # aiokafka wants the running loop
        consumer.subscribe([self.topic], listener=_Rebalance(self))
        await start_kafka_client(consumer, self.kafka)
        self._consumer = consumer

    async def stop(self) -> None:
        """Leave the group (within about a request timeout; Kafka may be away) and close."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await stop_client(consumer, f"the consumer of raw topic {self.topic}", LEAVE_TIMEOUT_S)

    def highwater(self, partition: int) -> int | None:
        """The end of a raw partition (the offset after its last record) as the last fetch response for it
        said; None before one came, or when the partition is not assigned. Asks Kafka nothing (for the lag
        metric)."""
        consumer = self._consumer
        if consumer is None:
            return None
        try:
            return consumer.highwater(TopicPartition(self.topic, partition))  # type: ignore[no-any-return]
        except AssertionError:  # not assigned (any more): a rebalance is under way
            return None

    def fetched_at(self, partition: int) -> int | None:
        """When the last fetch response for a raw partition came (ms since the epoch), the moment its
        ``highwater`` was read; None before one came, or when the partition is not assigned."""
        consumer = self._consumer
        if consumer is None:
            return None
        try:
            return consumer.last_poll_timestamp(TopicPartition(self.topic, partition))  # type: ignore[no-any-return]
        except AssertionError:  # not assigned (any more)
            return None

    async def committed_offsets(self, partitions: set[int]) -> dict[int, int]:
        """Where the group resumes each partition: its committed offset, or the partition's first offset
        when none was committed (``auto_offset_reset`` is earliest). A request per partition, once per
        assignment: the lag metric counts from there until this worker commits the partition itself."""
        consumer = self._consumer
        if consumer is None or not partitions:
            return {}
        offsets: dict[int, int] = {}
        never: list[TopicPartition] = []
        for partition in sorted(partitions):
            tp = TopicPartition(self.topic, partition)
            committed = await consumer.committed(tp)
            if committed is None:
                never.append(tp)
            else:
                offsets[partition] = committed
        if never:
            for tp, first in (await consumer.beginning_offsets(never)).items():
                offsets[tp.partition] = first
        return offsets

    def seek(self, partition: int, offset: int) -> None:
        """Fetch a raw partition from ``offset`` on (where the group resumes it, read after its
        transactional id was registered: aiokafka reads the committed offsets of new partitions before
        the worker can register theirs). Records fetched from elsewhere are dropped by the batch loop."""
        consumer = self._consumer
        if consumer is None:
            return
        try:
            consumer.seek(TopicPartition(self.topic, partition), offset)
        except IllegalStateError:  # not assigned (any more): a rebalance is under way
            log.info(
                "raw partition %s[%d] not moved to %d: not assigned any more", self.topic, partition, offset
            )

    def current(self, batch: RawBatch) -> bool:
        """Whether no rebalance happened since ``batch`` was fetched."""
        return batch.generation == self.generation

    async def batches(self) -> AsyncIterator[RawBatch]:
        """Batches of up to ``batch_max_events`` records: once the first record is there, more are taken
        as they arrive for at most ``batch_max_wait_ms`` (a busy topic fills a batch at once, a quiet
        one's events wait no longer than that)."""
        consumer, limit = self._consumer, self.batch_max_events
        if consumer is None:
            raise WorkerError(f"the consumer of raw topic {self.topic} is not started")
        loop = asyncio.get_running_loop()
        while True:
            fetched = await consumer.getmany(timeout_ms=1000, max_records=limit)
            if not fetched:
                continue
            generation = self.generation
            records = _records(fetched)
            deadline = loop.time() + self.batch_max_wait_ms / 1000
            while len(records) < limit and (remaining := deadline - loop.time()) > 0:
                more = await consumer.getmany(
                    timeout_ms=int(remaining * 1000), max_records=limit - len(records)
                )
                if not more:
                    break
                records += _records(more)
            if self.generation != generation:  # everything comes again from the committed offsets
                log.info("%d records fetched across a rebalance dropped unmerged", len(records))
                continue
            yield RawBatch(generation, records)


def _records(fetched: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]) -> list[RawRecord]:
    return list(chain.from_iterable(fetched.values()))

"""The bootstrap's raw events to Kafka from the Spark task that built them, with the project's own Kafka
client (aiokafka through ``runtime.kafka_clients``: the same security settings and the same errors as the
agents and workers).

Why not Spark's Kafka sink: there every event crossed from the Python worker into the JVM, became a row
and went through the Java producer, 19-29 µs of JVM CPU per table row, where appending the events to
whole Kafka batches here costs a few µs of Python (bench/bootstrap.md). Each record goes to the partition
Kafka's default partitioner gives its key (``runtime.key_partition``): where the agents' events of the same
Cassandra partition go.

Delivery: acks=all and the idempotent producer; a task ends only when Kafka has acknowledged every record
it published, and a failure fails the task with a PipelineError naming the topic and the reason. A task
Spark runs again publishes its events again: the workers drop the repeated digests.

One producer per Python worker process and ``kafka`` section, kept for the next task as the scan keeps its
Cassandra session; its event loop runs in a thread of its own, so Kafka's round trips overlap the building
of the next events.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import hashlib
import pickle
import threading
from collections import deque
from typing import Any

from aiokafka.errors import KafkaError

from pipeline.errors import PipelineError
from pipeline.kafka_source import kafka_failure
from runtime.config import KafkaConfig
from runtime.kafka_clients import make_producer, start_kafka_client, stop_client
from runtime.key_partition import key_partitions
from runtime.tls import ClientSetupError

#: bytes of keys and values handed to the producer at a time
CHUNK_BYTES = 1 << 20
#: chunks sent and not yet acknowledged, at most (bounds a task's memory)
CHUNKS_IN_FLIGHT = 4
#: a Kafka batch's size (the broker's default max.message.bytes is 1 MiB)
BATCH_BYTES = 512 * 1024
#: longest wait for one chunk's acknowledgements beyond the producer's own request timeout
_GRACE_S = 30.0

#: what fails a publish: a wait past its deadline is a TimeoutError, which is an OSError
_FAILURES = (KafkaError, OSError, ClientSetupError)


class _Producer:
    """A started idempotent producer and the thread that runs its event loop."""

    def __init__(self, kafka: KafkaConfig) -> None:
        self.kafka = kafka
        self.producer: Any = None
        #: held while a chunk's batches are handed over, so chunks reach each partition in the order written
        self.handing_over = asyncio.Lock()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="cdc-bootstrap-producer", daemon=True
        )
        self.thread.start()
        try:
            self.producer = self.call(self._start())
        except BaseException:
            self.close()
            raise

    async def _start(self) -> Any:
        producer = make_producer(
            self.kafka,
            client_id="cdc-bootstrap",
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            max_batch_size=BATCH_BYTES,
        )
        try:
            await start_kafka_client(producer, self.kafka)
        except BaseException:
            await stop_client(producer, "bootstrap producer")  # some failures leave it half started
            raise
        return producer

    def call(self, work: Any) -> Any:
        return self.submit(work).result(self.kafka.request_timeout_ms / 1000 + _GRACE_S)

    def submit(self, work: Any) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(work, self.loop)

    def close(self) -> None:
        if self.producer is not None and self.loop.is_running():
            asyncio.run_coroutine_threadsafe(
                stop_client(self.producer, "bootstrap producer"), self.loop
            ).result()
        self.producer = None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


#: this process's producers, by the kafka section that made them, the most recently used last
_PRODUCERS: dict[bytes, _Producer] = {}
_PRODUCERS_KEPT = 2


def _close_producers() -> None:
    while _PRODUCERS:
        _PRODUCERS.popitem()[1].close()


atexit.register(_close_producers)


class RawTopicWriter:
    """Publishes one task's raw events to ``kafka.raw_topic`` of ``partitions`` partitions; ``finish()``
    returns once all are acknowledged. ``what`` names the events in errors (e.g. "raw events of ks.t")."""

    def __init__(self, kafka: KafkaConfig, partitions: int, *, what: str) -> None:
        self.kafka = kafka
        self.partitions = partitions
        self.what = what
        self._key = hashlib.sha256(pickle.dumps(kafka)).digest()
        self._keys: list[bytes] = []
        self._values: list[bytes] = []
        self._bytes = 0
        self._pending: deque[concurrent.futures.Future[Any]] = deque()
        self._producer = self._guarded(self._open)

    def _open(self) -> _Producer:
        producer = _PRODUCERS.pop(self._key, None)
        if producer is None:
            producer = _Producer(self.kafka)
            while len(_PRODUCERS) >= _PRODUCERS_KEPT:  # a worker that served jobs of other configs
                _PRODUCERS.pop(next(iter(_PRODUCERS))).close()
        _PRODUCERS[self._key] = producer
        return producer

    def write(self, key: bytes, value: bytes) -> None:
        self._keys.append(key)
        self._values.append(value)
        self._bytes += len(key) + len(value)
        if self._bytes >= CHUNK_BYTES:
            self._guarded(self._flush)

    def finish(self) -> None:
        """Sends what is left and waits for every acknowledgement of this task's records."""
        self._guarded(self._flush)
        while self._pending:
            self._guarded(self._wait_oldest)

    def _flush(self) -> None:
        if not self._keys:
            return
        batches = self._batches(self._keys, self._values)
        self._keys, self._values, self._bytes = [], [], 0
        while len(self._pending) >= CHUNKS_IN_FLIGHT:
            self._wait_oldest()
        self._pending.append(self._producer.submit(self._send(batches)))

    def _wait_oldest(self) -> None:
        self._pending[0].result(self.kafka.request_timeout_ms / 1000 + _GRACE_S)
        self._pending.popleft()

    def _batches(self, keys: list[bytes], values: list[bytes]) -> list[tuple[int, Any]]:
        """(partition, filled BatchBuilder) for the records, built in this thread; a record larger than
        a batch goes alone in one (Kafka takes the first record of a batch whatever its size)."""
        producer = self._producer.producer
        by_partition: dict[int, list[int]] = {}
        for index, partition in enumerate(key_partitions(keys, self.partitions)):
            by_partition.setdefault(partition, []).append(index)
        batches = []
        for partition, indexes in by_partition.items():
            builder = producer.create_batch()
            for index in indexes:
                if builder.append(timestamp=None, key=keys[index], value=values[index]) is None:
                    batches.append((partition, builder))
                    builder = producer.create_batch()
                    builder.append(timestamp=None, key=keys[index], value=values[index])
            batches.append((partition, builder))
        return batches

    async def _send(self, batches: list[tuple[int, Any]]) -> None:
        producer = self._producer.producer
        topic = self.kafka.raw_topic
        async with self._producer.handing_over:  # taken in submission order (asyncio's lock is fair)
            delivered = [await producer.send_batch(builder, topic, partition=p) for p, builder in batches]
        await asyncio.gather(*delivered)

    def _guarded(self, step: Any) -> Any:
        """``step()``, a Kafka failure turned into the PipelineError that names the topic and why; the
        producer is dropped then (the next task starts a new one)."""
        try:
            return step()
        except _FAILURES as exc:
            self._drop()
            raise kafka_failure(
                exc, self.kafka, f"publish the {self.what} to raw topic {self.kafka.raw_topic!r}", at="on"
            ) from None
        except PipelineError:
            self._drop()
            raise

    def _drop(self) -> None:
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        producer = _PRODUCERS.pop(self._key, None)
        if producer is not None:
            producer.close()

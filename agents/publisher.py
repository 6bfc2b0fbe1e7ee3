"""Raw events to Kafka: idempotent producer, acks=all, bounded bytes in flight, resend while Kafka is down.

Delivery is at least once: a send that fails (broker gone, request timed out) is sent again after a
backoff, for as long as it takes; the callback runs once, on the first acknowledgement. Duplicates this
can cause are harmless downstream (the processor drops replica copies and redeliveries by digest).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from agents.metrics import AgentMetrics
from agents.stop_signal import wait_or_stop
from cdc.config import KafkaConfig

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 5.0


class RawPublisher:
    def __init__(self, config: KafkaConfig, *, max_in_flight_bytes: int, metrics: AgentMetrics) -> None:
        self.config = config
        self.max_in_flight_bytes = max_in_flight_bytes
        self.metrics = metrics
        self._producer: AIOKafkaProducer | None = None
        self._in_flight_bytes = 0
        self._in_flight = 0
        self._room = asyncio.Event()
        self._resends: set[asyncio.Task[None]] = set()
        self.connected = False

    async def start(self, stopping: asyncio.Event) -> bool:
        """Connect and create the topics, retrying with backoff; False if asked to stop meanwhile."""
        backoff = 0.2
        while not stopping.is_set():
            try:
                await self._ensure_topics()
                producer = AIOKafkaProducer(
                    bootstrap_servers=self.config.bootstrap_servers,
                    client_id="cdc-agent",
                    acks="all",
                    enable_idempotence=True,
                    linger_ms=5,
                    max_batch_size=256 * 1024,
                    request_timeout_ms=self.config.request_timeout_ms,
                    retry_backoff_ms=200,
                )
                await producer.start()
            except (KafkaError, OSError) as exc:
                log.warning("Kafka at %s not reachable yet (%s); retrying in %.1f s",
                            self.config.bootstrap_servers, exc, backoff)  # fmt: skip
                self.metrics.send_errors.inc()
                await wait_or_stop(stopping, backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            self._producer = producer
            self.connected = True
            return True
        return False

    async def _ensure_topics(self) -> None:
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.config.bootstrap_servers, request_timeout_ms=self.config.request_timeout_ms
        )
        await admin.start()
        try:
            wanted = [
                NewTopic(self.config.raw_topic, self.config.raw_partitions, self.config.replication_factor),
                NewTopic(
                    self.config.schema_topic,
                    1,
                    self.config.replication_factor,
                    topic_configs={"cleanup.policy": "compact"},
                ),
            ]
            existing = set(await admin.list_topics())
            missing = [t for t in wanted if t.name not in existing]
            if missing:
                try:
                    await admin.create_topics(missing)
                    log.info("created topics %s", ", ".join(t.name for t in missing))
                except TopicAlreadyExistsError:
                    pass  # another agent created it meanwhile
            described = await admin.describe_topics([self.config.raw_topic])
            partitions = len(described[0].get("partitions", [])) if described else 0
            if partitions and partitions != self.config.raw_partitions:
                log.error(
                    "raw topic %s has %d partitions, config kafka.raw_partitions says %d: every agent must "
                    "use the topic's count, and changing it moves partition keys to other partitions",
                    self.config.raw_topic, partitions, self.config.raw_partitions,
                )  # fmt: skip
        finally:
            await admin.close()

    @property
    def in_flight_bytes(self) -> int:
        return self._in_flight_bytes

    async def send(self, topic: str, key: bytes, value: bytes, on_ack: Callable[[], None]) -> None:
        """Hand one record to the producer, waiting while too many bytes are unacknowledged."""
        size = len(key) + len(value)
        while self._in_flight_bytes and self._in_flight_bytes + size > self.max_in_flight_bytes:
            self._room.clear()
            await self._room.wait()
        self._in_flight_bytes += size
        self._in_flight += 1
        self.metrics.in_flight_bytes.set(self._in_flight_bytes)
        await self._send_once(topic, key, value, size, on_ack, attempt=0)

    async def _send_once(
        self, topic: str, key: bytes, value: bytes, size: int, on_ack: Callable[[], None], attempt: int
    ) -> None:
        assert self._producer is not None, "start() first"
        try:
            future = await self._producer.send(topic, value=value, key=key)
        except KafkaError as exc:
            self._schedule_resend(topic, key, value, size, on_ack, attempt, exc)
            return
        future.add_done_callback(lambda f: self._delivered(f, topic, key, value, size, on_ack, attempt))

    def _delivered(
        self,
        future: asyncio.Future[object],
        topic: str,
        key: bytes,
        value: bytes,
        size: int,
        on_ack: Callable[[], None],
        attempt: int,
    ) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None:
            self._schedule_resend(topic, key, value, size, on_ack, attempt, exc)
            return
        self.connected = True
        on_ack()
        self._release(size)

    def _schedule_resend(
        self,
        topic: str,
        key: bytes,
        value: bytes,
        size: int,
        on_ack: Callable[[], None],
        attempt: int,
        exc: BaseException,
    ) -> None:
        self.connected = False
        self.metrics.send_errors.inc()
        delay = min(0.1 * 2**attempt, MAX_BACKOFF_S)
        if attempt in (0, 5) or attempt % 20 == 0:
            log.warning("send to %s failed (%s: %s); resending in %.1f s (attempt %d)",
                        topic, type(exc).__name__, exc, delay, attempt + 1)  # fmt: skip

        async def resend() -> None:
            await asyncio.sleep(delay)
            await self._send_once(topic, key, value, size, on_ack, attempt + 1)

        task = asyncio.get_running_loop().create_task(resend())
        self._resends.add(task)
        task.add_done_callback(self._resends.discard)

    def _release(self, size: int) -> None:
        self._in_flight_bytes -= size
        self._in_flight -= 1
        self.metrics.in_flight_bytes.set(self._in_flight_bytes)
        self._room.set()

    async def drain(self, timeout_s: float) -> bool:
        """Wait until everything sent is acknowledged (or the timeout); True if nothing is left in flight."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._in_flight and loop.time() < deadline:
            await asyncio.sleep(0.05)
        return self._in_flight == 0

    async def stop(self) -> None:
        for task in list(self._resends):
            task.cancel()
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

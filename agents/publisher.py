"""Raw events to Kafka: idempotent producer, acks=all, bounded bytes in flight, resend while Kafka is down.

Delivery is at least once: a send that fails (broker gone, request timed out) is sent again after a
backoff, for as long as it takes; the callback runs once, on the first acknowledgement. Duplicates this
can cause are harmless downstream (the processor drops replica copies and redeliveries by digest).

An idempotent producer whose batches expired while Kafka was away has used sequence numbers the broker
never saw, and every later batch fails with OutOfOrderSequenceNumber for good; such a producer is replaced
by a new one (a new producer id starts its sequences afresh) before the failed records are resent. So is
a producer that leaves records unanswered for STUCK_WINDOWS request timeouts while a new one can connect:
after a broker restart aiokafka can keep a batch for good (seen in a fault campaign: 15 records for eight
minutes with Kafka serving everyone else). A replaced producer gets STOP_TIMEOUT_S to finish; every send it
has not answered by then is sent again on the new one, so no record waits on a producer that is gone.

While the broker is away aiokafka keeps retrying batches itself (with idempotence, without a deadline), so
no send fails; a watchdog counts a send error, logs and clears `connected` whenever records stay
unacknowledged for request_timeout_ms, so an outage shows in the metrics and the health endpoint (with
the reason when it is one the config can fix, from runtime.kafka_clients.diagnose_kafka). With nothing
in flight no send tells, so then the watchdog asks Kafka for metadata every PROBE_EVERY_S
(runtime.kafka_probe): an idle agent's `connected` follows Kafka too.

Every client is made by runtime.kafka_clients (`kafka.security`: TLS, SASL). At start a refusal the
config must fix (wrong password, untrusted certificate, TLS on one side only, a key file that does not
load) stops the agent with AccessError naming the key, once it repeats ACCESS_REFUSALS_BEFORE_EXIT times;
nothing has been read then, so nothing is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    InvalidProducerEpoch,
    KafkaError,
    OutOfOrderSequenceNumber,
    ProducerFenced,
    UnknownProducerId,
)

from agents.errors import ACCESS_REFUSALS_BEFORE_EXIT, AccessError
from agents.metrics import AgentMetrics
from agents.segment_gaps import gap_topic
from agents.stop_signal import wait_or_stop
from runtime.config import KafkaConfig
from runtime.kafka_clients import (
    KafkaAccessError,
    diagnose_kafka,
    make_producer,
    start_kafka_client,
    stop_client,
)
from runtime.kafka_probe import PROBE_EVERY_S, KafkaProbe
from runtime.kafka_topics import TopicSpec, ensure_topics
from runtime.logs import Repeats
from runtime.secrets import scrub
from runtime.tls import ClientSetupError, KeyPasswordRefused

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 5.0
#: failed sends are summarised in one log line per interval, not one line per record
FAILURE_LOG_INTERVAL_S = 30.0
#: errors that mean the producer's idempotence state no longer matches the broker's: resending with the
#: same producer fails the same way forever
PRODUCER_STATE_ERRORS = (OutOfOrderSequenceNumber, InvalidProducerEpoch, ProducerFenced, UnknownProducerId)
#: request timeouts in a row without an acknowledgement after which the producer is replaced, if a new one
#: connects (during an outage none does, and the old one keeps retrying)
STUCK_WINDOWS = 2


class ProducerRetired(KafkaError):
    """The send's producer was replaced before it answered: the record is sent again on the new one."""


@dataclass(slots=True, eq=False)
class _Send:
    """One send a producer has taken and not answered yet; settled once, by its answer or its retirement."""

    producer: AIOKafkaProducer
    settle: Callable[[BaseException | None], None]
    settled: bool = False

    def answer(self, exc: BaseException | None) -> None:
        if not self.settled:
            self.settled = True
            self.settle(exc)


@dataclass(slots=True)
class _Part:
    """Records of one send_batch for one partition, sent (and resent) together."""

    topic: str
    partition: int
    keys: list[bytes]
    values: list[bytes]
    tags: list[int]
    on_ack: Callable[[list[int]], None]
    size: int = 0

    def __post_init__(self) -> None:
        self.size = sum(map(len, self.keys)) + sum(map(len, self.values))

    def piece(self, start: int, end: int) -> _Part:
        if start == 0 and end == len(self.keys):
            return self
        return _Part(self.topic, self.partition, self.keys[start:end], self.values[start:end],
                     self.tags[start:end], self.on_ack)  # fmt: skip

    def acked_one(self, index: int) -> Callable[[], None]:
        tag, on_ack = self.tags[index], self.on_ack
        return lambda: on_ack([tag])


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
        self._stale: AIOKafkaProducer | None = None
        self._replacing = asyncio.Lock()
        self._closing: set[asyncio.Task[None]] = set()
        self._progress_at = time.monotonic()  # last ack, or when records began to wait after none did
        self._watchdog: asyncio.Task[None] | None = None
        self._failures = Repeats(FAILURE_LOG_INTERVAL_S)
        self._failures_unlogged = 0  # records whose failed sends the log has not counted yet
        self._unsettled: set[_Send] = set()
        self._silent_windows = 0  # request timeouts in a row that passed without an acknowledgement
        self._probe = KafkaProbe(config)
        self._probe_at = 0.0  # when the idle probe may look next
        self.connected = False

    async def start(self, stopping: asyncio.Event) -> bool:
        """Connect and create the topics, retrying with backoff; False if asked to stop meanwhile.

        AccessError when the config cannot work: a client that cannot be made (ClientSetupError), or
        ACCESS_REFUSALS_BEFORE_EXIT refusals in a row that the config must fix (KafkaAccessError).
        """
        backoff = 0.2
        refusals = 0
        while not stopping.is_set():
            try:
                await self._ensure_topics()
                producer = await self._new_producer()
            except KeyPasswordRefused as exc:  # a credential, as a refused login is
                raise AccessError(f"Kafka refuses the agent: {exc}") from exc
            except ClientSetupError as exc:
                raise AccessError(f"cannot make a Kafka client: {exc}") from exc
            except KafkaAccessError as exc:
                reason = exc.args[0] if exc.args else str(exc)  # str() of a KafkaError adds its class name
                refusals += 1
                if refusals >= ACCESS_REFUSALS_BEFORE_EXIT:
                    raise AccessError(f"Kafka refuses the agent: {reason}") from exc
                log.warning("Kafka refuses the agent (%s); retrying in %.1f s", reason, backoff)
                self.metrics.send_errors.inc()
                await wait_or_stop(stopping, backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            except (KafkaError, OSError) as exc:
                refusals = 0
                log.warning("Kafka at %s not reachable yet (%s); retrying in %.1f s",
                            self.config.bootstrap_servers, self._safe(exc), backoff)  # fmt: skip
                self.metrics.send_errors.inc()
                await wait_or_stop(stopping, backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            self._producer = producer
            self.connected = True
            self._watchdog = asyncio.get_running_loop().create_task(self._watch_acknowledgements())
            return True
        return False

    async def _watch_acknowledgements(self) -> None:
        """Count, log and flag records Kafka leaves unacknowledged for request_timeout_ms (see above)."""
        timeout = self.config.request_timeout_ms / 1000
        while True:
            await asyncio.sleep(max(0.05, min(1.0, timeout / 4)))
            now = time.monotonic()
            if not self._in_flight:
                if now >= self._probe_at:
                    self._probe_at = now + PROBE_EVERY_S
                    problem = await self._probe.look()
                    if not self._in_flight:  # else the records sent meanwhile tell
                        self._probed(problem)
                continue
            waited = now - self._progress_at
            if waited > timeout:
                self.connected = False
                self.metrics.send_errors.inc()
                self._silent_windows += 1
                if self._silent_windows >= STUCK_WINDOWS and self._stale is None:
                    records, self._stale = self._in_flight, self._producer
                    if await self._replace_stale_producer(
                        f"{records} records unacknowledged for {self._silent_windows * timeout:.0f} s "
                        "though a new producer connects"
                    ):
                        self._silent_windows = 0
                        self._progress_at = time.monotonic()
                        continue
                    self._stale = None  # Kafka is away: the producer keeps retrying, try again later
                reason = await self._diagnose()
                log.warning("%d records (%d bytes) unacknowledged for %.0f s: Kafka at %s is not answering%s",
                            self._in_flight, self._in_flight_bytes, waited, self.config.bootstrap_servers,
                            f" ({reason})" if reason else "")  # fmt: skip
                self._progress_at = time.monotonic()

    def _probed(self, problem: BaseException | None) -> None:
        """An idle agent's view of Kafka, from the probe's answer (logged when it changes)."""
        if problem is None and not self.connected:
            log.info("Kafka at %s answers again", self.config.bootstrap_servers)
        elif problem is not None and self.connected:
            log.warning("Kafka at %s does not answer (%s: %s)", self.config.bootstrap_servers,
                        type(problem).__name__, self._safe(problem))  # fmt: skip
        self.connected = problem is None

    async def _diagnose(self) -> str | None:
        """Why Kafka does not answer, when the config can fix it (a password changed on the broker...)."""
        try:
            return await diagnose_kafka(self.config)
        except Exception as exc:  # a diagnosis must never end the watchdog
            log.debug("diagnosing Kafka failed: %s", self._safe(exc))
            return None

    def _safe(self, exc: BaseException) -> str:
        """An exception's text for a log line, with any secret of the config masked."""
        security = self.config.security
        return scrub(str(exc), (security.password, security.key_password))

    async def _new_producer(self) -> AIOKafkaProducer:
        """A started producer (servers, request timeout and security from the config); KafkaAccessError
        when it cannot connect for a reason the config can fix."""
        producer = make_producer(
            self.config,
            client_id="cdc-agent",
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            max_batch_size=256 * 1024,
            retry_backoff_ms=200,
        )
        try:
            await start_kafka_client(producer, self.config)
        except KafkaAccessError:
            raise  # start_kafka_client stopped it
        except BaseException:
            await producer.stop()
            raise
        return producer

    async def _replace_stale_producer(
        self, why: str = "its sequence numbers no longer matched the broker's"
    ) -> bool:
        """Swap the producer marked stale (one that failed with a PRODUCER_STATE_ERRORS error, or left
        records unanswered) for a new one, once; True if it was swapped."""
        async with self._replacing:
            stale = self._stale
            if stale is None or stale is not self._producer:
                return False
            try:
                fresh = await self._new_producer()
            except (KafkaError, OSError, ClientSetupError) as exc:
                log.warning("cannot start a new Kafka producer yet (%s); trying again later", self._safe(exc))
                return False
            self._producer = fresh
            self._stale = None
            log.warning("replaced the Kafka producer: %s", why)
            task = asyncio.get_running_loop().create_task(self._retire(stale))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
            return True

    async def _retire(self, producer: AIOKafkaProducer) -> None:
        """Stop a replaced producer (within STOP_TIMEOUT_S), then send again whatever it left unanswered."""
        await stop_client(producer, "the replaced Kafka producer")
        left = [send for send in self._unsettled if send.producer is producer]
        if left:
            log.warning("the replaced Kafka producer left %d sends unanswered; sending them again", len(left))
        for send in left:
            self._unsettled.discard(send)
            send.answer(ProducerRetired())

    def _watch(
        self,
        producer: AIOKafkaProducer,
        future: asyncio.Future[object],
        settle: Callable[[BaseException | None], None],
    ) -> None:
        """Settle a send once: with its future's outcome, or as retired if its producer is replaced first."""
        send = _Send(producer, settle)
        self._unsettled.add(send)

        def answered(done: asyncio.Future[object]) -> None:
            self._unsettled.discard(send)
            send.answer(ProducerRetired() if done.cancelled() else done.exception())

        future.add_done_callback(answered)

    async def _ensure_topics(self) -> None:
        raw, schema_topic = self.config.raw_topic, self.config.schema_topic
        partitions = await ensure_topics(
            self.config,
            [
                TopicSpec(raw, self.config.raw_partitions, self.config.replication_factor),
                TopicSpec(schema_topic, 1, self.config.replication_factor, {"cleanup.policy": "compact"}),
                TopicSpec(gap_topic(raw), 1, self.config.replication_factor),
            ],
        )
        if partitions.get(raw) and partitions[raw] != self.config.raw_partitions:
            log.error(
                "raw topic %s has %d partitions, config kafka.raw_partitions says %d: every agent must "
                "use the topic's count, and changing it moves partition keys to other partitions",
                raw, partitions[raw], self.config.raw_partitions,
            )  # fmt: skip

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
        if not self._in_flight:
            self._progress_at = time.monotonic()
        self._in_flight += 1
        self.metrics.in_flight_bytes.set(self._in_flight_bytes)
        await self._send_once(topic, key, value, size, on_ack, attempt=0)

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition ids in the order the producer's default partitioner indexes them."""
        producer = self._producer
        assert producer is not None, "start() first"
        return list(await producer.partitions_for(topic))

    async def send_batch(
        self,
        topic: str,
        keys: list[bytes],
        values: list[bytes],
        partitions: list[int],
        tags: list[int],
        on_ack: Callable[[list[int]], None],
    ) -> None:
        """Hand records to the producer as whole Kafka batches, one per partition (the agent's path for
        the native core's batches): `partitions` are the ones the default partitioner picks for the keys,
        `on_ack` gets the `tags` of each part once Kafka acknowledged it. Delivery is as for `send`: each
        part is resent until acknowledged, and bytes in flight stay bounded."""
        by_partition: dict[int, list[int]] = {}
        for index, partition in enumerate(partitions):
            by_partition.setdefault(partition, []).append(index)
        for partition, indexes in by_partition.items():
            part = _Part(topic, partition, [keys[i] for i in indexes], [values[i] for i in indexes],
                         [tags[i] for i in indexes], on_ack)  # fmt: skip
            while self._in_flight_bytes and self._in_flight_bytes + part.size > self.max_in_flight_bytes:
                self._room.clear()
                await self._room.wait()
            self._in_flight_bytes += part.size
            if not self._in_flight:
                self._progress_at = time.monotonic()
            self._in_flight += len(part.tags)
            self.metrics.in_flight_bytes.set(self._in_flight_bytes)
            await self._send_part(part, attempt=0)

    async def _send_part(self, part: _Part, attempt: int) -> None:
        producer = self._producer
        assert producer is not None, "start() first"
        start = 0
        while start < len(part.keys):
            builder = producer.create_batch()
            end = start
            while end < len(part.keys) and builder.append(
                timestamp=None, key=part.keys[end], value=part.values[end]
            ):
                end += 1
            if end == start:  # one record larger than a batch: the producer sends it alone
                key, value = part.keys[start], part.values[start]
                await self._send_once(part.topic, key, value, len(key) + len(value), part.acked_one(start),
                                      attempt)  # fmt: skip
                end = start + 1
            else:
                piece = part.piece(start, end)
                try:
                    future = await producer.send_batch(builder, part.topic, partition=part.partition)
                except KafkaError as exc:
                    self._schedule_part_resend(piece, attempt, exc, producer)
                else:
                    self._watch(producer, future,
                                lambda exc, p=piece: self._part_delivered(exc, p, attempt, producer))  # fmt: skip
            start = end

    def _part_delivered(
        self, exc: BaseException | None, part: _Part, attempt: int, producer: AIOKafkaProducer
    ) -> None:
        if exc is not None:
            self._schedule_part_resend(part, attempt, exc, producer)
            return
        self._acknowledged()
        part.on_ack(part.tags)
        self._release_many(part.size, len(part.tags))

    def _schedule_part_resend(
        self, part: _Part, attempt: int, exc: BaseException, producer: AIOKafkaProducer
    ) -> None:
        delay = self._failed(part.topic, len(part.tags), exc, producer, attempt)

        async def resend() -> None:
            await asyncio.sleep(delay)
            if self._stale is not None:
                await self._replace_stale_producer()
            await self._send_part(part, attempt + 1)

        task = asyncio.get_running_loop().create_task(resend())
        self._resends.add(task)
        task.add_done_callback(self._resends.discard)

    async def _send_once(
        self, topic: str, key: bytes, value: bytes, size: int, on_ack: Callable[[], None], attempt: int
    ) -> None:
        producer = self._producer
        assert producer is not None, "start() first"
        try:
            future = await producer.send(topic, value=value, key=key)
        except KafkaError as exc:
            self._schedule_resend(topic, key, value, size, on_ack, attempt, exc, producer)
            return
        self._watch(producer, future,
                    lambda exc: self._delivered(exc, topic, key, value, size, on_ack, attempt, producer))  # fmt: skip

    def _delivered(
        self,
        exc: BaseException | None,
        topic: str,
        key: bytes,
        value: bytes,
        size: int,
        on_ack: Callable[[], None],
        attempt: int,
        producer: AIOKafkaProducer,
    ) -> None:
        if exc is not None:
            self._schedule_resend(topic, key, value, size, on_ack, attempt, exc, producer)
            return
        self._acknowledged()
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
        producer: AIOKafkaProducer,
    ) -> None:
        delay = self._failed(topic, 1, exc, producer, attempt)

        async def resend() -> None:
            await asyncio.sleep(delay)
            if self._stale is not None:
                await self._replace_stale_producer()
            await self._send_once(topic, key, value, size, on_ack, attempt + 1)

        task = asyncio.get_running_loop().create_task(resend())
        self._resends.add(task)
        task.add_done_callback(self._resends.discard)

    def _failed(
        self, topic: str, records: int, exc: BaseException, producer: AIOKafkaProducer, attempt: int
    ) -> float:
        """Count and (at most every FAILURE_LOG_INTERVAL_S) log failed sends; the backoff before resending."""
        self.connected = False
        self.metrics.send_errors.inc(records)
        if isinstance(exc, PRODUCER_STATE_ERRORS) and producer is self._producer:
            self._stale = producer
        self._failures_unlogged += records
        written = self._failures.note(time.monotonic())
        if written is not None:
            _, since = written
            if since:
                log.warning("%d sends failed in the last %.0f s (latest to %s: %s: %s); resending with backoff",
                            self._failures_unlogged, since, topic, type(exc).__name__, self._safe(exc))  # fmt: skip
            else:
                sends = "a send" if self._failures_unlogged == 1 else f"{self._failures_unlogged} sends"
                log.warning("%s to %s failed (%s: %s); resending with backoff (further failures are "
                            "summarised every %.0f s)", sends, topic, type(exc).__name__, self._safe(exc),
                            FAILURE_LOG_INTERVAL_S)  # fmt: skip
            self._failures_unlogged = 0
        return min(0.1 * 2**attempt, MAX_BACKOFF_S)

    def _acknowledged(self) -> None:
        self.connected = True
        self._progress_at = time.monotonic()
        self._silent_windows = 0

    def _release(self, size: int) -> None:
        self._release_many(size, 1)

    def _release_many(self, size: int, records: int) -> None:
        self._in_flight_bytes -= size
        self._in_flight -= records
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
        if self._watchdog is not None:
            self._watchdog.cancel()
        await self._probe.stop()
        for task in list(self._closing):  # a replaced producer's stop, bounded by stop_client
            with contextlib.suppress(Exception):
                await task
        for task in list(self._resends):
            task.cancel()
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

"""Which worker owns which raw partition, so a REST request landing anywhere reaches the right state.

Every worker announces the partitions it was just assigned on a small compacted topic
(`<app_id>.owners`, key = partition, value = the worker's URL and when it took the partition over) and
reads everyone's announcements. After a rebalance the new owner's announcement is the newest one, so the
table converges as soon as the assignment does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from runtime.config import KafkaConfig
from runtime.kafka_clients import make_consumer, make_producer, start_kafka_client, stop_client

log = logging.getLogger(__name__)

#: how long announcing newly assigned partitions may take (it runs inside the group's rebalance)
ANNOUNCE_TIMEOUT_S = 10.0


class OwnerDirectory:
    def __init__(self, kafka: KafkaConfig, topic: str, url: str, worker_id: str) -> None:
        self.kafka = kafka
        self.topic = topic
        self.url = url
        self.worker_id = worker_id
        self._owners: dict[int, tuple[str, str, float]] = {}
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._follow: asyncio.Task[None] | None = None

    def owner(self, partition: int) -> str | None:
        """The URL of the worker that last announced ``partition``."""
        found = self._owners.get(partition)
        return found[0] if found is not None else None

    def table(self) -> dict[int, dict[str, object]]:
        return {p: {"url": u, "worker_id": w, "since": t} for p, (u, w, t) in sorted(self._owners.items())}

    async def start(self) -> None:
        producer = make_producer(self.kafka, acks="all")
        await start_kafka_client(producer, self.kafka)
        self._producer = producer
        consumer = make_consumer(self.kafka, enable_auto_commit=False)
        await start_kafka_client(consumer, self.kafka)
        self._consumer = consumer
        tp = TopicPartition(self.topic, 0)
        self._consumer.assign([tp])
        await self._consumer.seek_to_beginning(tp)
        self._follow = asyncio.get_running_loop().create_task(self._read())

    async def announce(self, partitions: set[int]) -> None:
        """Tell every worker that these partitions are ours from now on."""
        if self._producer is None:
            return
        value = json.dumps({"url": self.url, "worker_id": self.worker_id, "since": time.time()}).encode()
        producer = self._producer
        try:
            async with asyncio.timeout(ANNOUNCE_TIMEOUT_S):  # it runs in the rebalance: never for long
                for partition in sorted(partitions):
                    await producer.send_and_wait(
                        self.topic, value=value, key=str(partition).encode(), partition=0
                    )
        except (KafkaError, TimeoutError) as exc:  # routing only: a worker still serves what it owns
            log.warning("cannot announce partitions %s on %s: %r", sorted(partitions), self.topic, exc)

    async def _read(self) -> None:
        assert self._consumer is not None
        while True:
            try:
                batch = await self._consumer.getmany(timeout_ms=1000)
            except KafkaError as exc:
                log.warning("reading %s failed (%r); retrying", self.topic, exc)
                await asyncio.sleep(1)
                continue
            for records in batch.values():
                for record in records:
                    if record.key is None or record.value is None:
                        continue
                    try:
                        entry = json.loads(record.value)
                        self._owners[int(record.key)] = (entry["url"], entry["worker_id"], entry["since"])
                    except (ValueError, KeyError):
                        log.warning("unreadable owner record at %s@%d", self.topic, record.offset)

    async def stop(self) -> None:
        follow, self._follow = self._follow, None
        if follow is not None:
            follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follow
        clients, self._consumer, self._producer = (self._consumer, self._producer), None, None
        for client in clients:
            if client is not None:
                await stop_client(client, f"the client of {self.topic}")

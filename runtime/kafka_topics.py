"""Creating the Kafka topics a process needs, with the partition count and cleanup policy it relies on, and
finding the partitions of a topic a consumer reads without subscribing.

The admin client comes from runtime.kafka_clients (`make_admin`), so it carries `kafka.security`; when it
cannot connect, `KafkaAccessError` (a KafkaConnectionError) says why and which setting to change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from runtime.config import KafkaConfig
from runtime.kafka_clients import KafkaAccessError, make_admin, start_kafka_client

log = logging.getLogger(__name__)


@dataclass(slots=True, frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int = 1
    configs: dict[str, str] = field(default_factory=dict)


async def ensure_topics(kafka: KafkaConfig, specs: list[TopicSpec]) -> dict[str, int]:
    """Create the missing topics; return every topic's actual partition count (an existing topic keeps
    its own, so callers compare it with what they need).

    The admin client uses the config's servers, `request_timeout_ms` and security; a connection that
    fails for a reason the config can fix raises KafkaAccessError naming the `kafka.security` key.
    """
    admin = make_admin(kafka)
    try:
        await start_kafka_client(admin, kafka)
    except KafkaAccessError:
        raise  # start_kafka_client closed it
    except BaseException:
        with contextlib.suppress(KafkaError, OSError):
            await admin.close()  # a client that never connected still holds its connections' tasks
        raise
    try:
        existing = set(await admin.list_topics())
        missing = [
            NewTopic(s.name, s.partitions, s.replication_factor, topic_configs=dict(s.configs))
            for s in specs
            if s.name not in existing
        ]
        if missing:
            try:
                await admin.create_topics(missing)
                log.info("created topics %s", ", ".join(t.name for t in missing))
            except TopicAlreadyExistsError:
                pass  # another process created it meanwhile
        counts: dict[str, int] = {}
        for _ in range(50):  # a new topic's partitions show up in metadata a moment after it is created
            described = await admin.describe_topics([s.name for s in specs])
            counts = {d["topic"]: len(d.get("partitions", [])) for d in described}
            if all(counts.get(s.name) for s in specs):
                break
            await asyncio.sleep(0.1)
        return counts
    finally:
        await admin.close()


async def topic_partitions(
    consumer: AIOKafkaConsumer, topic: str, *, timeout_s: float = 0.0, interval_s: float = 0.2
) -> list[TopicPartition]:
    """The partitions of ``topic``, sorted; [] when the topic has not shown up within ``timeout_s``.

    A started consumer knows the topics that existed when it fetched its metadata, and
    ``partitions_for_topic`` reads only that cache: a topic created later, or one the consumer never
    subscribed to (the callers ``assign`` partitions), stays unknown until the next refresh, minutes later.
    aiokafka has no public call to refresh metadata for such a topic, hence the client's private
    ``force_metadata_update()``. It asks for every topic, not this one, so a broker that auto-creates
    topics does not create it. ``timeout_s`` 0 refreshes once; more keeps refreshing every ``interval_s``
    for a topic another process is about to create.
    """
    found = consumer.partitions_for_topic(topic)
    deadline = time.monotonic() + timeout_s
    while not found:
        await consumer._client.force_metadata_update()
        found = consumer.partitions_for_topic(topic)
        if found or time.monotonic() >= deadline:
            break
        await asyncio.sleep(interval_s)
    return [TopicPartition(topic, p) for p in sorted(found or ())]

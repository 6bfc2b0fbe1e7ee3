"""`topic_partitions` against the real broker: a topic that exists, one created after the consumer started,
and one that never comes (the broker auto-creates topics, and asking for partitions must not create it)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from runtime.config import KafkaConfig
from runtime.kafka_topics import TopicSpec, ensure_topics, topic_partitions

T = TypeVar("T")


def _topic() -> str:
    return f"partitions-{uuid.uuid4().hex[:8]}"


def _with_consumer(bootstrap: str, use: Callable[[AIOKafkaConsumer], Awaitable[T]]) -> T:
    """``use`` a started consumer that subscribes to nothing (as the callers of topic_partitions do)."""

    async def run() -> T:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            return await use(consumer)
        finally:
            await consumer.stop()

    return asyncio.run(asyncio.wait_for(run(), 60))


def test_an_existing_topic_gives_its_partitions_sorted(kafka_bootstrap: str) -> None:
    topic = _topic()
    asyncio.run(ensure_topics(KafkaConfig(bootstrap_servers=kafka_bootstrap), [TopicSpec(topic, 3)]))

    found = _with_consumer(kafka_bootstrap, lambda consumer: topic_partitions(consumer, topic))

    assert found == [TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(topic, 2)]


def test_a_topic_created_after_the_consumer_started_is_found_by_one_refresh(kafka_bootstrap: str) -> None:
    topic = _topic()

    async def use(consumer: AIOKafkaConsumer) -> tuple[set[int] | None, list[TopicPartition]]:
        await ensure_topics(KafkaConfig(bootstrap_servers=kafka_bootstrap), [TopicSpec(topic, 2)])
        cached = consumer.partitions_for_topic(topic)  # the metadata fetched at start lacks it
        return cached, await topic_partitions(consumer, topic)

    cached, found = _with_consumer(kafka_bootstrap, use)

    assert not cached
    assert found == [TopicPartition(topic, 0), TopicPartition(topic, 1)]


def test_a_topic_created_while_waiting_is_found(kafka_bootstrap: str) -> None:
    topic = _topic()

    async def use(consumer: AIOKafkaConsumer) -> list[TopicPartition]:
        async def create_later() -> None:
            await asyncio.sleep(1.0)
            await ensure_topics(KafkaConfig(bootstrap_servers=kafka_bootstrap), [TopicSpec(topic, 2)])

        creating = asyncio.get_running_loop().create_task(create_later())
        try:
            return await topic_partitions(consumer, topic, timeout_s=20.0, interval_s=0.1)
        finally:
            await creating

    assert _with_consumer(kafka_bootstrap, use) == [TopicPartition(topic, 0), TopicPartition(topic, 1)]


def test_a_topic_that_never_exists_gives_nothing_within_the_timeout_and_is_not_created(
    kafka_bootstrap: str,
) -> None:
    topic = _topic()

    async def use(consumer: AIOKafkaConsumer) -> tuple[list[TopicPartition], float]:
        started = time.monotonic()
        found = await topic_partitions(consumer, topic, timeout_s=1.0)
        return found, time.monotonic() - started

    found, took = _with_consumer(kafka_bootstrap, use)

    assert found == []
    assert 1.0 <= took < 10.0, took
    assert topic not in asyncio.run(_topics(kafka_bootstrap))


async def _topics(bootstrap: str) -> list[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return list(await admin.list_topics())
    finally:
        await admin.close()

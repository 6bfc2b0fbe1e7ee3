"""The oracle reads a topic as read_committed consumers will see it for good, on the real broker.

A transaction left open (by a worker killed mid-batch) holds read_committed readers at its first offset,
so what another worker committed behind it is not readable yet. Read then, a topic looks as if the later
events were lost; the oracle waits for the open transaction to end instead.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer

from cdc.verify.oracle import TopicNotStable, read_topic_records
from runtime.config import KafkaConfig
from runtime.kafka_topics import TopicSpec, ensure_topics
from tests.integration.agent_harness import unique_name


async def _transactional_producer(bootstrap: str) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=unique_name("tx"), transaction_timeout_ms=60_000
    )
    await producer.start()
    return producer


async def _a_committed_record_behind_an_open_transaction(bootstrap: str) -> None:
    topic = unique_name("oracle")
    await ensure_topics(KafkaConfig(bootstrap_servers=bootstrap), [TopicSpec(topic, 1, 1)])
    stalled = await _transactional_producer(bootstrap)
    other = await _transactional_producer(bootstrap)
    try:
        await stalled.begin_transaction()
        await stalled.send_and_wait(topic, b"from the stalled batch", key=b"k", partition=0)
        await other.begin_transaction()
        await other.send_and_wait(topic, b"committed behind it", key=b"k", partition=0)
        await other.commit_transaction()

        with pytest.raises(
            TopicNotStable, match=rf"topic {topic}: a transaction is still open .* partitions 0"
        ):
            await read_topic_records(bootstrap, topic, stable_wait_s=1.0)

        read = asyncio.ensure_future(read_topic_records(bootstrap, topic))
        await asyncio.sleep(2.0)
        assert not read.done(), f"the read returned while a transaction was open: {read.result()}"
        await stalled.abort_transaction()
        records = await asyncio.wait_for(read, 60)
        assert [value for *_, value in records] == [b"committed behind it"], records
    finally:
        await stalled.stop()
        await other.stop()


def test_a_read_waits_for_an_open_transaction_and_sees_what_was_committed_behind_it(
    kafka_bootstrap: str,
) -> None:
    asyncio.run(_a_committed_record_behind_an_open_transaction(kafka_bootstrap))

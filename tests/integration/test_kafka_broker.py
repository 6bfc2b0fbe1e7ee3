"""The real KRaft broker: records produced with aiokafka come back in order, by key-stable partition."""

from __future__ import annotations

import asyncio
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic


async def _round_trip(
    bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]
) -> list[tuple[int, bytes, bytes]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    finally:
        await admin.close()

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        for key, value in records:
            await producer.send(topic, value=value, key=key)
        await producer.flush()
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
        group_id=f"test-{uuid.uuid4().hex[:6]}",
    )  # fmt: skip
    await consumer.start()
    received: list[tuple[int, bytes, bytes]] = []
    try:
        while len(received) < len(records):
            batch = await consumer.getmany(timeout_ms=1000)
            if not batch and len(received) == 0:
                continue
            for tp, messages in batch.items():
                received.extend((tp.partition, m.key, m.value) for m in messages)
    finally:
        await consumer.stop()
    return received


def test_produce_and_consume_through_real_broker(kafka_bootstrap: str) -> None:
    topic = f"roundtrip-{uuid.uuid4().hex[:8]}"
    records = [(f"key-{i % 7}".encode(), f"value-{i}".encode()) for i in range(300)]
    received = asyncio.run(asyncio.wait_for(_round_trip(kafka_bootstrap, topic, records), 60))

    assert sorted((k, v) for _, k, v in received) == sorted(records)
    partitions_per_key: dict[bytes, set[int]] = {}
    for partition, key, _ in received:
        partitions_per_key.setdefault(key, set()).add(partition)
    assert all(len(p) == 1 for p in partitions_per_key.values()), partitions_per_key
    assert len({p for ps in partitions_per_key.values() for p in ps}) > 1, (
        "7 keys all hashed to one partition"
    )
    # Within a key (hence a partition) the order of production is preserved.
    for key in partitions_per_key:
        values = [v for _, k, v in received if k == key]
        assert values == [v for k, v in records if k == key]

"""The bootstrap's publisher (pipeline/raw_topic_writer.py) against a real Kafka broker.

Every record written reaches the topic exactly once, in the partition aiokafka's own default partitioner
picks for its key (where the agents' events of that key go), in the order written per key, including a
record larger than a Kafka batch; two writers of one process share a producer. A record the broker refuses
and a broker that does not answer are PipelineErrors naming the raw topic, and the next writer starts a
fresh producer.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import defaultdict
from collections.abc import Iterator

import pytest
from aiokafka.partitioner import DefaultPartitioner

from pipeline import raw_topic_writer
from pipeline.errors import PipelineError
from pipeline.raw_topic_writer import BATCH_BYTES, CHUNK_BYTES, RawTopicWriter
from runtime.config import KafkaConfig
from runtime.kafka_topics import TopicSpec, ensure_topics
from tests.integration.agent_harness import TopicReader, wait_until

PARTITIONS = 7


@pytest.fixture(autouse=True)
def no_kept_producer() -> Iterator[None]:
    """Each test starts and ends with no producer kept by this process (a Python worker keeps one)."""
    raw_topic_writer._close_producers()
    yield
    raw_topic_writer._close_producers()


def _topic(kafka_bootstrap: str) -> KafkaConfig:
    kafka = KafkaConfig(bootstrap_servers=kafka_bootstrap, raw_topic=f"writer_{uuid.uuid4().hex[:8]}")
    asyncio.run(ensure_topics(kafka, [TopicSpec(kafka.raw_topic, PARTITIONS)]))
    return kafka


def _read(kafka: KafkaConfig, count: int) -> list[tuple[int, int, bytes, bytes]]:
    with TopicReader(kafka.bootstrap_servers, kafka.raw_topic) as reader:
        wait_until(lambda: reader.poll(0.5) >= 0 and len(reader.raw) >= count, 60, what=f"{count} records")
        reader.poll(1.0)  # nothing more may come
        return list(reader.raw)


def test_every_record_lands_once_in_its_keys_partition_in_order(kafka_bootstrap: str) -> None:
    kafka = _topic(kafka_bootstrap)
    rng = random.Random(11)
    keys = [rng.randbytes(rng.randint(1, 80)) for _ in range(300)]
    written: list[tuple[bytes, bytes]] = []
    for writer_number in range(2):  # two tasks of one process: the second reuses the producer
        writer = RawTopicWriter(kafka, PARTITIONS, what=f"records of writer {writer_number}")
        for n in range(4_000):
            key = rng.choice(keys)
            value = f"{writer_number}:{n}:".encode() + rng.randbytes(rng.randint(0, 1_500))
            if n == 2_000:
                value += bytes(BATCH_BYTES + 1_000)  # larger than a batch: sent alone
            writer.write(key, value)
            written.append((key, value))
        writer.finish()
    assert sum(len(k) + len(v) for k, v in written) > 2 * CHUNK_BYTES  # several chunks in flight
    assert len(raw_topic_writer._PRODUCERS) == 1

    records = _read(kafka, len(written))
    assert sorted((k, v) for _, _, k, v in records) == sorted(written)
    partitioner = DefaultPartitioner()
    everything = list(range(PARTITIONS))
    wrong = [(p, k) for p, _, k, _ in records if p != partitioner(k, everything, everything)]
    assert not wrong, f"{len(wrong)} records outside their key's partition, e.g. {wrong[:3]}"
    by_key: dict[bytes, list[bytes]] = defaultdict(list)
    for _, _, key, value in sorted(records, key=lambda r: (r[0], r[1])):
        by_key[key].append(value)
    expected: dict[bytes, list[bytes]] = defaultdict(list)
    for key, value in written:
        expected[key].append(value)
    assert by_key == expected  # each key's records in the order written


def test_a_record_the_broker_refuses_fails_naming_the_topic_and_the_next_writer_starts_afresh(
    kafka_bootstrap: str,
) -> None:
    kafka = _topic(kafka_bootstrap)
    writer = RawTopicWriter(kafka, PARTITIONS, what="raw events of ks.big")
    writer.write(b"key", bytes(3 * 2**20))  # over the broker's message.max.bytes
    with pytest.raises(PipelineError) as failure:
        writer.finish()
    message = str(failure.value)
    assert f"publish the raw events of ks.big to raw topic {kafka.raw_topic!r} on Kafka" in message, message
    assert "MessageSizeTooLarge" in message, message
    assert not raw_topic_writer._PRODUCERS  # dropped with its failure

    writer = RawTopicWriter(kafka, PARTITIONS, what="raw events of ks.small")
    writer.write(b"key", b"value")
    writer.finish()
    assert [(k, v) for _, _, k, v in _read(kafka, 1)] == [(b"key", b"value")]


def test_an_unreachable_broker_is_an_error_naming_the_setting() -> None:
    kafka = KafkaConfig(bootstrap_servers="127.0.0.1:1", raw_topic="cdc.raw", request_timeout_ms=3_000)
    with pytest.raises(PipelineError) as failure:
        RawTopicWriter(kafka, PARTITIONS, what="raw events of ks.t")
    message = str(failure.value)
    assert "publish the raw events of ks.t to raw topic 'cdc.raw' on Kafka at 127.0.0.1:1" in message, message
    assert "kafka.bootstrap_servers" in message, message
    assert not raw_topic_writer._PRODUCERS


def test_a_process_keeps_two_producers_at_most(kafka_bootstrap: str) -> None:
    """A Python worker that serves jobs of several configs closes the producer it used least recently."""
    configs = [_topic(kafka_bootstrap) for _ in range(3)]
    for kafka in [*configs, configs[1]]:
        writer = RawTopicWriter(kafka, PARTITIONS, what=f"records for {kafka.raw_topic}")
        writer.write(b"key", kafka.raw_topic.encode())
        writer.finish()
    kept = list(raw_topic_writer._PRODUCERS.values())
    assert [p.kafka.raw_topic for p in kept] == [configs[2].raw_topic, configs[1].raw_topic]
    for kafka, times in zip(configs, (1, 2, 1), strict=True):
        assert [v for _, _, _, v in _read(kafka, times)] == [kafka.raw_topic.encode()] * times

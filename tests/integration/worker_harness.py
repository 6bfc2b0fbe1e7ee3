"""Run workers as `cdc worker` processes and read back their clean topics, for the acceptance tests.

A worker is exercised as an operator runs it: a YAML file, a child process, its REST endpoints and
its Kafka topics (read with read_committed isolation, as consumers must).
"""

from __future__ import annotations

import asyncio
import json
import random
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from infra.cassandra import CassandraNode
from runtime.kafka_topics import topic_partitions
from schemas.schema_event import SchemaEvent
from tests.integration.agent_harness import (
    AgentProcess,
    RawTopic,
    free_port,
    new_agent,
    running_agents,
    wait_until,
)


def worker_config(
    *,
    bootstrap: str,
    raw_topic: str,
    schema_topic: str,
    raw_partitions: int,
    data_directory: Path,
    app_id: str,
    worker_id: str,
    topic_prefix: str,
    worker: dict[str, Any] | None = None,
    kafka: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`kafka`: more keys of the kafka section (its `security`, for a secured broker)."""
    return {
        "cluster": "acceptance",
        "kafka": {
            "bootstrap_servers": bootstrap,
            "raw_topic": raw_topic,
            "schema_topic": schema_topic,
            "raw_partitions": raw_partitions,
            **(kafka or {}),
        },
        "worker": {
            "data_directory": str(data_directory),
            "app_id": app_id,
            "worker_id": worker_id,
            "clean_topic_prefix": topic_prefix,
            "web_port": free_port(),
            "transaction_timeout_ms": 10_000,
            **(worker or {}),
        },
    }


class WorkerProcess(AgentProcess):
    """One `cdc worker --config FILE` child process."""

    command = "worker"

    @staticmethod
    def http_port(config: dict[str, Any]) -> int:
        return config["worker"]["web_port"]

    @staticmethod
    def state_path(config: dict[str, Any]) -> Path:
        return Path(config["worker"]["data_directory"])

    def rest_text(self, path: str, token: str | None = None, **query: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.port}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def rest(self, path: str, token: str | None = None, **query: str) -> tuple[int, Any]:
        status, text = self.rest_text(path, token, **query)
        return status, json.loads(text or "null")

    def row(self, keyspace: str, table: str, key: dict[str, Any]) -> tuple[int, Any]:
        return self.rest(f"/rows/{keyspace}/{table}", key=json.dumps(key))


async def _copy_shuffled(
    bootstrap: str,
    records: Sequence[tuple[int, int, bytes, bytes]],
    topic: str,
    partitions: int,
    copies: int,
    seed: int | None,
) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    per_partition: dict[int, list[tuple[bytes, bytes]]] = defaultdict(list)
    for partition, _, key, value in records:
        per_partition[partition].extend([(key, value)] * copies)
    rng = random.Random(seed)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    sent = 0
    try:
        for partition, items in sorted(per_partition.items()):
            if seed is not None:
                rng.shuffle(items)
            for key, value in items:
                await producer.send(topic, value=value, key=key, partition=partition)
                sent += 1
        await producer.flush()
    finally:
        await producer.stop()
    return sent


def copy_shuffled(
    bootstrap: str,
    records: Sequence[tuple[int, int, bytes, bytes]],
    topic: str,
    partitions: int,
    *,
    copies: int = 3,
    seed: int | None = 7,
) -> int:
    """Write every record `copies` times to the same partition of a new topic, shuffled within each partition
    (in order: `seed` None)."""
    return asyncio.run(_copy_shuffled(bootstrap, records, topic, partitions, copies, seed))


async def _group_lag(bootstrap: str, group: str, topic: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        committed = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        ends = await consumer.end_offsets(await topic_partitions(consumer, topic))
    finally:
        await consumer.stop()
    lag = 0
    for tp, end in ends.items():
        meta = committed.get(tp)
        lag += end - (meta.offset if meta is not None and meta.offset >= 0 else 0)
    return lag


def group_lag(bootstrap: str, group: str, topic: str) -> int:
    """Records of `topic` the consumer group has not committed yet."""
    return asyncio.run(_group_lag(bootstrap, group, topic))


def publish_through_agent(
    cassandra_node: CassandraNode,
    bootstrap: str,
    workdir: Path,
    keyspace: str,
    write: Callable[[], int],
) -> tuple[list[tuple[int, int, bytes, bytes]], str]:
    """Run ``write`` (it returns how many statements it executed) with an agent publishing the keyspace's
    CDC writes; the raw records it published, and its schema topic."""
    with running_agents() as agents:
        agent = new_agent(
            agents, workdir, cdc_raw=cassandra_node.spec.cdc_raw, bootstrap=bootstrap, keyspaces=[keyspace]
        )
        agent.start()
        agent.wait_healthy()
        count = write()
        with RawTopic(bootstrap, agent.raw_topic) as topic:
            wait_until(
                lambda: topic.poll(0.5) >= 0 and len(topic.records) >= count,
                120,
                lambda: f"the agent to publish {count} raw events (got {len(topic.records)})",
            )
            topic.drain(quiet_s=2.0)
            records = list(topic.raw)
        assert len(records) >= count, f"agent published {len(records)} raw events for {count} statements"
        return records, agent.schema_topic


async def publish_schema_event(bootstrap: str, topic: str, event: SchemaEvent) -> None:
    """One table's schema event on the schema topic, keyed as an agent keys it."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, event.encode(), key=event.key)
    finally:
        await producer.stop()


def topic_ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's end offset (high watermark)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4().hex[:8]}"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions
        }
    finally:
        consumer.close()

"""The demo's Kafka topics, recreated empty by every run."""

from __future__ import annotations

import asyncio
import time

from aiokafka.errors import KafkaError

from cdc.demo.errors import DemoError
from cdc.demo.table import KEYSPACE, TABLE
from runtime.config import KafkaConfig
from runtime.kafka_clients import KafkaAccessError, make_admin, start_kafka_client
from runtime.kafka_topics import TopicSpec, ensure_topics

RAW_TOPIC = "demo.raw"
SCHEMA_TOPIC = "demo.schemas"
CLEAN_PREFIX = "demo"
CLEAN_TOPIC = f"{CLEAN_PREFIX}.{KEYSPACE}.{TABLE}"
APP_PREFIX = "cdc-demo-"
"""Each run's worker app id (consumer group, changelog topics) starts with this; older runs' topics go."""
PARTITIONS = 3


async def reset_topics(kafka: KafkaConfig) -> None:
    """Delete the demo's topics and earlier runs' worker topics, wait until Kafka has forgotten them, and
    create the demo's topics again: this run's consumer reads this run's events and nothing else."""
    bootstrap = kafka.bootstrap_servers
    admin = make_admin(kafka)
    try:
        await start_kafka_client(admin, kafka)
    except KafkaAccessError as exc:  # start_kafka_client closed it
        raise DemoError(f"{exc} (`.venv/bin/cdc infra status` shows how to connect)") from exc
    except KafkaError as exc:
        await admin.close()
        raise DemoError(
            f"Kafka at {bootstrap} does not answer ({exc}); `.venv/bin/cdc infra status` shows it"
        ) from exc
    try:
        fixed = {RAW_TOPIC, SCHEMA_TOPIC, CLEAN_TOPIC}
        doomed = {t for t in await admin.list_topics() if t in fixed or t.startswith(APP_PREFIX)}
        if doomed:
            await admin.delete_topics(sorted(doomed))
        deadline = time.monotonic() + 60
        while doomed & set(await admin.list_topics()):
            if time.monotonic() > deadline:
                raise DemoError(
                    f"Kafka at {bootstrap} did not delete the demo topics {sorted(doomed)} in 60 s"
                )
            await asyncio.sleep(0.2)
    finally:
        await admin.close()
    specs = [
        TopicSpec(RAW_TOPIC, PARTITIONS),
        TopicSpec(SCHEMA_TOPIC, 1, configs={"cleanup.policy": "compact"}),
        TopicSpec(CLEAN_TOPIC, PARTITIONS, configs={"cleanup.policy": "compact"}),
    ]
    counts: dict[str, int] = {}
    for _ in range(50):  # Kafka may refuse a just-deleted name for a moment
        counts = await ensure_topics(kafka, specs)
        if all(counts.get(s.name) == s.partitions for s in specs):
            return
        await asyncio.sleep(0.2)
    raise DemoError(f"Kafka at {bootstrap} did not create the demo topics (partitions: {counts})")

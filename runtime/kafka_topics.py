"""Creating the Kafka topics a process needs, with the partition count and cleanup policy it relies on."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

log = logging.getLogger(__name__)


@dataclass(slots=True, frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int = 1
    configs: dict[str, str] = field(default_factory=dict)


async def ensure_topics(
    bootstrap_servers: str, specs: list[TopicSpec], *, request_timeout_ms: int = 30_000
) -> dict[str, int]:
    """Create the missing topics; return every topic's actual partition count (an existing topic keeps
    its own, so callers compare it with what they need)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=request_timeout_ms)
    await admin.start()
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

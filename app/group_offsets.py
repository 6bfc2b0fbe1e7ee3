"""Where the worker group resumes its raw partitions: the committed offsets, read when a partition is taken
over (after its transactional id is registered, so every transaction of the previous owner has finished).

Read with the admin client (OffsetFetch to the group coordinator): the committed offset of a partition
whose last transaction committed includes that transaction's offsets, and one that aborted does not.
"""

from __future__ import annotations

import asyncio

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from runtime.config import KafkaConfig
from runtime.kafka_clients import make_admin, start_kafka_client, stop_client


class GroupOffsets:
    """The committed offsets of ``group_id`` on one topic (the raw topic)."""

    def __init__(self, kafka: KafkaConfig, group_id: str, topic: str) -> None:
        self.kafka = kafka
        self.group_id = group_id
        self.topic = topic
        self._admin: AIOKafkaAdminClient | None = None

    async def read(self, partitions: set[int]) -> dict[int, int | None]:
        """Each partition's committed offset: the next record the group would consume (None: the group
        never committed one there)."""
        if not partitions:
            return {}
        admin = await self._client()
        try:
            found = await asyncio.wait_for(
                admin.list_consumer_group_offsets(
                    self.group_id, partitions=[TopicPartition(self.topic, p) for p in sorted(partitions)]
                ),
                max(10.0, self.kafka.request_timeout_ms / 1000 * 2),
            )
        except BaseException:
            await self.stop()  # a new client next time, whatever state this one is in
            raise
        offsets: dict[int, int | None] = dict.fromkeys(partitions)
        for tp, meta in found.items():
            if tp.topic == self.topic and tp.partition in offsets and meta.offset >= 0:
                offsets[tp.partition] = meta.offset
        return offsets

    async def _client(self) -> AIOKafkaAdminClient:
        if self._admin is None:
            admin = make_admin(self.kafka)
            try:
                await start_kafka_client(admin, self.kafka)
            except BaseException:
                await stop_client(admin, f"the admin client of group {self.group_id}")
                raise
            self._admin = admin
        return self._admin

    async def stop(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            await stop_client(admin, f"the admin client of group {self.group_id}")

"""A metadata request to Kafka every few seconds: whether Kafka answers even while nothing is sent or
committed (an idle process's outage), for the worker's app/kafka_status.py and the agent's publisher. It
asks for the raw topic only, so its answer stays small on a cluster of many topics.

Its own admin client (made with runtime.kafka_clients, so with `kafka.security`), started when first
needed and made anew after a failure; each look waits at most ``timeout_s``.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka.admin import AIOKafkaAdminClient

from runtime.config import KafkaConfig
from runtime.kafka_clients import make_admin, start_kafka_client, stop_client

log = logging.getLogger(__name__)

#: seconds between two looks, and the most one may take
PROBE_EVERY_S = 5.0
PROBE_TIMEOUT_S = 5.0


class KafkaProbe:
    def __init__(self, kafka: KafkaConfig, timeout_s: float = PROBE_TIMEOUT_S) -> None:
        self.kafka = kafka
        self.topic = kafka.raw_topic
        self.timeout_s = timeout_s
        self._admin: AIOKafkaAdminClient | None = None

    async def look(self) -> BaseException | None:
        """None when a broker answered a metadata request in time, else why not."""
        try:
            await asyncio.wait_for(self._describe(), self.timeout_s)
            return None
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # anything that stops the answer is the answer
            await self.stop()
            return (
                exc
                if not isinstance(exc, TimeoutError)
                else TimeoutError(f"no answer within {self.timeout_s:.0f} s")
            )

    async def _describe(self) -> None:
        if self._admin is None:
            admin = make_admin(self.kafka)
            try:
                await start_kafka_client(admin, self.kafka)
            except BaseException:
                await stop_client(admin, "the Kafka probe's admin client")
                raise
            self._admin = admin
        await self._admin.describe_topics([self.topic])

    async def stop(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            await stop_client(admin, "the Kafka probe's admin client")

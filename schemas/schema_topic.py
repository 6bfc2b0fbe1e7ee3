"""Table schemas as the agents published them on the compacted schema topic, followed while running.

Workers never query Cassandra: each schema event carries the table's CQL DDL (with its id, user types
and dropped columns), which ``load_schema_from_cql`` turns back into the decoder's view of the table.
The newest version of a table wins, so images show the columns a SELECT would show now.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.errors import SchemaError
from cassandra_model.table_schema import TableSchema
from runtime.config import KafkaConfig
from runtime.kafka_clients import KafkaAccessError, make_consumer, start_kafka_client, stop_client
from runtime.kafka_topics import topic_partitions
from schemas.schema_event import SchemaEvent, SchemaEventError, SchemaTopicError

log = logging.getLogger(__name__)

#: how long a starting worker waits for the schema topic (an agent starting beside it creates it)
SCHEMA_TOPIC_WAIT_S = 10.0


class TableSchemas:
    """Table id -> newest TableSchema, read from the schema topic from its beginning and then followed."""

    def __init__(self, kafka: KafkaConfig, topic: str) -> None:
        """`kafka`: servers, request timeout and security of the consumer; `topic`: the schema topic
        (usually `kafka.schema_topic`)."""
        self.kafka = kafka
        self.topic = topic
        self._tables: dict[uuid.UUID, TableSchema] = {}
        self._dropped: set[uuid.UUID] = set()
        self._consumer: AIOKafkaConsumer | None = None
        self._follow: asyncio.Task[None] | None = None
        self._arrived = asyncio.Event()
        self.bad_events = 0
        #: how many times a table's schema was set: a copy of a schema taken at one count is the one
        #: ``get`` returns as long as the count stays
        self.changes = 0

    def get(self, table_id: uuid.UUID) -> TableSchema | None:
        return self._tables.get(table_id)

    def by_name(self, keyspace: str, table: str) -> TableSchema | None:
        for schema in self._tables.values():
            if schema.keyspace == keyspace and schema.table == table and schema.table_id not in self._dropped:
                return schema
        return None

    def tables(self) -> list[TableSchema]:
        return [s for s in self._tables.values() if s.table_id not in self._dropped]

    async def start(self) -> None:
        """Read the topic up to its current end (so every table known so far is here), then follow it."""
        consumer = make_consumer(self.kafka, enable_auto_commit=False)
        try:
            await start_kafka_client(consumer, self.kafka)
        except KafkaAccessError:
            raise  # start_kafka_client stopped it
        except BaseException:
            await consumer.stop()  # a consumer that never connected still holds its client
            raise
        self._consumer = consumer
        try:
            partitions = await self._partitions(consumer)
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            ends = await consumer.end_offsets(partitions)
            while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
                batch = await consumer.getmany(timeout_ms=500)
                for records in batch.values():
                    for record in records:
                        self._apply(record.value)
        except BaseException:
            await consumer.stop()
            self._consumer = None
            raise
        log.info("read %d table schemas from %s", len(self._tables), self.topic)
        self._follow = asyncio.get_running_loop().create_task(self._follow_topic(consumer))

    async def _partitions(self, consumer: AIOKafkaConsumer) -> list[TopicPartition]:
        found = await topic_partitions(consumer, self.topic, timeout_s=SCHEMA_TOPIC_WAIT_S)
        if found:
            return found
        raise SchemaTopicError(
            f"schema topic {self.topic} does not exist at {self.kafka.bootstrap_servers}: start an agent first "
            "(it creates the topic and publishes the table schemas), or check kafka.schema_topic"
        )

    async def _follow_topic(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            try:
                batch = await consumer.getmany(timeout_ms=1000)
            except KafkaError as exc:
                log.warning("reading schema topic %s failed (%s); retrying", self.topic, exc)
                await asyncio.sleep(1)
                continue
            for records in batch.values():
                for record in records:
                    self._apply(record.value)

    def _apply(self, value: bytes | None) -> None:
        if value is None:
            return
        try:
            event = SchemaEvent.decode(value)
            table_id = uuid.UUID(event.table_id)
            if event.dropped:
                self._dropped.add(table_id)
                return
            catalog = load_schema_from_cql(event.cql)
            schema = catalog.get(table_id)
        except (SchemaEventError, SchemaError, ValueError) as exc:
            self.bad_events += 1
            log.error("schema topic %s holds an unreadable schema event, skipped: %s", self.topic, exc)
            return
        if schema is None:
            self.bad_events += 1
            log.error(
                "schema event for %s.%s holds no table with id %s", event.keyspace, event.table, table_id
            )
            return
        self._dropped.discard(table_id)
        self._tables[table_id] = schema
        self.changes += 1
        self._arrived.set()

    async def wait_for(
        self,
        table_id: uuid.UUID,
        timeout_s: float,
        accept: Callable[[TableSchema], bool] | None = None,
    ) -> TableSchema | None:
        """The schema of a table, waiting up to ``timeout_s`` for it to arrive on the topic; with
        ``accept``, for a version it accepts (a newer one, after an ALTER TABLE). None when none came."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while (schema := self._tables.get(table_id)) is None or (accept is not None and not accept(schema)):
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return None
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), min(remaining, 0.5))
        return schema

    async def stop(self) -> None:
        if self._follow is not None:
            self._follow.cancel()
            await asyncio.gather(self._follow, return_exceptions=True)
        if self._consumer is not None:
            await stop_client(self._consumer, f"the consumer of schema topic {self.topic}")
            self._consumer = None

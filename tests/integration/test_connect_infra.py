"""The Kafka Connect test services work: a standalone worker runs Debezium's JDBC sink into PostgreSQL.

Hand-written Connect-JSON change events (Debezium's envelope, key `{schema, payload}`) are produced in
Kafka transactions, as the worker does: the sink applies creates, an update and a delete (with its
tombstone) as upserts and deletes keyed by the record key, and never applies a record of an aborted
transaction. This proves the infrastructure and the event shape the sink accepts, before the real
pipeline feeds it (test_connect_sink.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from infra.connect import JDBC_SINK_CONNECTOR, Connector, ConnectWorker
from infra.errors import ServiceStartError
from infra.postgres import PostgresServer
from tests.integration.agent_harness import unique_name
from tests.integration.connect_fixtures import (
    column_types,
    postgres_fixture,  # noqa: F401 (the postgres fixture)
    sink_into,
    start_connect_fixture,  # noqa: F401 (the start_connect fixture)
    table_name,
    wait_for_rows,
)

KEY_FIELDS = [{"field": "id", "type": "int32", "optional": False}]
ROW_FIELDS = [
    {"field": "id", "type": "int32", "optional": False},
    {"field": "name", "type": "string", "optional": True},
    {"field": "price", "type": "double", "optional": True},
    {"field": "sold", "type": "int64", "optional": True, "name": "org.apache.kafka.connect.data.Timestamp"},
]
SOURCE_FIELDS = [
    {"field": "connector", "type": "string", "optional": False},
    {"field": "name", "type": "string", "optional": False},
    {"field": "ts_ms", "type": "int64", "optional": False},
    {"field": "snapshot", "type": "string", "optional": True},
    {"field": "db", "type": "string", "optional": False},
    {"field": "table", "type": "string", "optional": False},
]


def _key(topic: str, row_id: int) -> bytes:
    schema = {"type": "struct", "name": f"{topic}.Key", "optional": False, "fields": KEY_FIELDS}
    return json.dumps({"schema": schema, "payload": {"id": row_id}}).encode()


def _value(topic: str, op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> bytes:
    row = {"type": "struct", "name": f"{topic}.Value", "optional": True, "fields": ROW_FIELDS}
    schema = {
        "type": "struct",
        "name": f"{topic}.Envelope",
        "optional": False,
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            {
                "type": "struct",
                "name": "cdc.change.Source",
                "optional": False,
                "fields": SOURCE_FIELDS,
                "field": "source",
            },
            {"field": "op", "type": "string", "optional": False},
            {"field": "ts_ms", "type": "int64", "optional": True},
        ],
    }
    source = {
        "connector": "cassandra",
        "name": "smoke",
        "ts_ms": 1,
        "snapshot": "false",
        "db": "shop",
        "table": "items",
    }
    payload = {"before": before, "after": after, "source": source, "op": op, "ts_ms": 2}
    return json.dumps({"schema": schema, "payload": payload}).encode()


async def _produce(
    bootstrap: str,
    topic: str,
    committed: list[tuple[bytes, bytes | None]],
    aborted: list[tuple[bytes, bytes | None]],
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique_name("smoke"))
    await producer.start()
    try:
        async with producer.transaction():
            for key, value in committed[:2]:
                await producer.send_and_wait(topic, value=value, key=key)
        await producer.begin_transaction()
        for key, value in aborted:
            await producer.send_and_wait(topic, value=value, key=key)
        await producer.abort_transaction()
        async with producer.transaction():
            for key, value in committed[2:]:
                await producer.send_and_wait(topic, value=value, key=key)
    finally:
        await producer.stop()


def test_jdbc_sink_applies_connect_json_change_events_from_committed_transactions(
    kafka_bootstrap: str,
    start_connect: Callable[[Sequence[Connector]], ConnectWorker],
    postgres: PostgresServer,
) -> None:
    """Also the REST path: the sink is added to a running worker (its converters are Kafka's JsonConverter)."""
    topic = f"{unique_name('smoke')}.shop.items"
    one = {"id": 1, "name": "tea", "price": 2.5, "sold": 1_700_000_000_123}
    one_v2 = {**one, "name": "green tea", "price": 3.25}
    two = {"id": 2, "name": "cake", "price": 4.0, "sold": None}
    ghost = {"id": 3, "name": "never committed", "price": 0.0, "sold": None}
    committed = [
        (_key(topic, 1), _value(topic, "c", None, one)),
        (_key(topic, 2), _value(topic, "c", None, two)),
        (_key(topic, 1), _value(topic, "u", one, one_v2)),
        (_key(topic, 2), _value(topic, "d", two, None)),
        (_key(topic, 2), None),  # the tombstone after a delete
    ]
    aborted = [
        (_key(topic, 3), _value(topic, "c", None, ghost)),
        (_key(topic, 1), _value(topic, "d", one, None)),
    ]
    asyncio.run(_produce(kafka_bootstrap, topic, committed, aborted))

    name = unique_name("smoke-sink")
    connect_worker = start_connect([])
    connect_worker.put_connector(sink_into(postgres, name, [topic]))
    table = table_name(topic)
    # a Connect Timestamp is stored as `timestamp` (no zone) holding UTC (use.time.zone=UTC)
    expected = [{"id": 1, "name": "green tea", "price": 3.25, "sold": "2023-11-14T22:13:20.123000"}]

    def readable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**r, "sold": r["sold"].isoformat() if r["sold"] is not None else None} for r in rows]

    wait_for_rows(connect_worker, name, postgres, table, expected, transform=readable, timeout_s=90)
    types = column_types(postgres, table)
    assert types == {
        "id": "integer",
        "name": "text",
        "price": "double precision",
        "sold": "timestamp(6) without time zone",
    }, types
    connect_worker.delete_connector(name)


def test_a_failing_connector_reports_its_trace_and_log(
    start_connect: Callable[[Sequence[Connector]], ConnectWorker],
) -> None:
    """A sink task that cannot start is reported at once with its trace and the worker's log, not after a
    timeout: here the JDBC sink refuses a config without connection.username."""
    bad = Connector(
        unique_name("bad-sink"),
        {
            "connector.class": JDBC_SINK_CONNECTOR,
            "topics": "x",
            "connection.url": "jdbc:postgresql://127.0.0.1:1/none",
        },
    )
    with pytest.raises(ServiceStartError) as raised:
        start_connect([bad])
    message = str(raised.value)
    assert f"connector {bad.name!r}" in message and "task 0 FAILED" in message, message
    assert "JdbcSinkConnectorConfig" in message, message  # the trace
    assert "'connection.username' value is invalid" in message, message  # the log tail

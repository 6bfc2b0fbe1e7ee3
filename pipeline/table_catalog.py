"""The CDC tables as the agents published them on the schema topic: the jobs' source of table schemas.

Spark jobs read the same compacted schema topic as the workers (``schemas.schema_topic``), so a lake table
has exactly the columns the workers' images have, and no job needs Cassandra to learn a schema.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from aiokafka.errors import KafkaError

from cassandra_model.table_schema import TableSchema
from pipeline.errors import PipelineError, ServiceUnreachable
from pipeline.kafka_source import kafka_failure
from runtime.config import KafkaConfig
from runtime.tls import ClientSetupError
from schemas.schema_event import SchemaTopicError
from schemas.schema_topic import TableSchemas


async def _load(kafka: KafkaConfig) -> list[TableSchema]:
    schemas = TableSchemas(kafka, kafka.schema_topic)
    await schemas.start()
    try:
        return schemas.tables()
    finally:
        await schemas.stop()


def load_table_schemas(kafka: KafkaConfig) -> dict[tuple[str, str], TableSchema]:
    """(keyspace, table) -> newest schema of every CDC table on the schema topic."""
    try:
        tables = asyncio.run(_load(kafka))
    except SchemaTopicError as exc:
        raise ServiceUnreachable(
            f"cannot read the schema topic {kafka.schema_topic!r} from Kafka at {kafka.bootstrap_servers} "
            f"(config kafka.bootstrap_servers): {exc}"
        ) from exc
    except (KafkaError, OSError, ClientSetupError) as exc:  # refused credentials, certificate...
        raise kafka_failure(exc, kafka, f"read the schema topic {kafka.schema_topic!r}") from exc
    return {(t.keyspace, t.table): t for t in tables}


def select_tables(
    schemas: dict[tuple[str, str], TableSchema], wanted: str | Iterable[str] = ""
) -> list[TableSchema]:
    """The schemas named by ``--tables`` (``ks.table`` comma list; empty: every table), sorted by name."""
    names = [n.strip() for n in (wanted.split(",") if isinstance(wanted, str) else wanted) if n.strip()]
    if not names:
        return [schemas[k] for k in sorted(schemas)]
    chosen = []
    for name in names:
        keyspace, _, table = name.partition(".")
        schema = schemas.get((keyspace, table))
        if schema is None:
            known = ", ".join(f"{k}.{t}" for k, t in sorted(schemas)) or "none yet"
            raise PipelineError(
                f"--tables: {name!r} is not a CDC table on the schema topic (known: {known}); names are "
                "keyspace.table and the table needs cdc = true and a running agent"
            )
        chosen.append(schema)
    return chosen

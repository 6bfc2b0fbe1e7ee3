"""Raw-topic records for the worker-core tests (unit and integration)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cassandra_model.table_schema import TableSchema
from schemas.raw_event import encode_raw_event, encode_raw_key


@dataclass(frozen=True, slots=True)
class Record:
    """A raw-topic record as the raw consumer hands it to the batch loop (its RawRecord protocol)."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def raw_key(schema: TableSchema, event: dict[str, Any]) -> bytes:
    return encode_raw_key(schema.keyspace, schema.table, event["partition_key"])


def raw_record(partition: int, offset: int, schema: TableSchema, event: dict[str, Any]) -> Record:
    """The record an agent publishes for ``event``."""
    return Record(partition, offset, raw_key(schema, event), encode_raw_event(event))


def replica_copy(event: dict[str, Any], node: str) -> dict[str, Any]:
    """The same partition update as another replica logs it: same digest, another source."""
    return dict(
        event, source={**event["source"], "node": node, "entry_offset": event["source"]["entry_offset"] + 7}
    )

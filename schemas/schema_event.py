"""Table schemas on the compacted schema topic: key = table id, value = JSON with the table's CQL DDL.

The DDL (with `WITH ID`, user types and dropped columns) is what `load_schema_from_cql` reads, so a worker
rebuilds exactly the decoding view the agent had, without querying Cassandra.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

SCHEMA_FORMAT = 1


class SchemaEventError(ValueError):
    """A schema-topic record that does not decode."""


class SchemaTopicError(SchemaEventError):
    """The schema topic cannot be read: it does not exist, or Kafka does not answer for it."""


@dataclass(slots=True, frozen=True)
class SchemaEvent:
    cluster: str
    keyspace: str
    table: str
    table_id: str
    cdc: bool
    dropped: bool
    cql: str
    published_at_ms: int

    @property
    def key(self) -> bytes:
        return self.table_id.encode()

    def encode(self) -> bytes:
        return json.dumps({"format": SCHEMA_FORMAT, **{f: getattr(self, f) for f in self.__slots__}}).encode()

    @classmethod
    def decode(cls, data: bytes) -> SchemaEvent:
        try:
            values: dict[str, Any] = json.loads(data)
            if values.pop("format") != SCHEMA_FORMAT:
                raise ValueError("unknown format")
            return cls(**values)
        except (ValueError, TypeError, KeyError) as exc:
            raise SchemaEventError(f"schema event does not decode: {data[:80]!r} ({exc})") from exc


def schema_event(cluster: str, keyspace: str, table: str, table_id: str, *, cdc: bool, dropped: bool,
                 cql: str) -> SchemaEvent:  # fmt: skip
    return SchemaEvent(cluster, keyspace, table, table_id, cdc, dropped, cql, int(time.time() * 1000))

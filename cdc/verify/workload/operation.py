"""What the verifier's clients run: operations, grouped in phases that schema changes separate."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KINDS: tuple[str, ...] = (
    "insert",
    "insert_ttl",
    "update",
    "update_ttl",
    "update_static",
    "list_append",
    "list_prepend",
    "list_remove",
    "set_add",
    "set_remove",
    "map_put",
    "map_remove",
    "collection_overwrite",
    "udt_field",
    "delete_cells",
    "delete_row",
    "delete_range",
    "delete_partition",
    "batch",
    "lwt_insert",
    "lwt_update",
    "counter",
)


@dataclass(slots=True, frozen=True)
class Operation:
    """One client request. ``timestamp`` is the USING TIMESTAMP it carries (µs), None when Cassandra picks
    it (LWT, counters). A batch names its tables joined by ',' and the partition of its first statement."""

    kind: str
    table: str
    cql: str
    params: tuple[Any, ...]
    timestamp: int | None
    partition: tuple[Any, ...]
    ttl: int | None = None  # the longest USING TTL in the statement, if any


@dataclass(slots=True, frozen=True)
class Phase:
    """Operations the clients run concurrently, then schema changes made while every client is paused."""

    operations: list[Operation]
    schema_change_after: list[str] = field(default_factory=list)

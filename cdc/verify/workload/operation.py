"""What the verifier's clients run: operations, grouped in phases that schema changes separate."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cdc.verify.workload.cell_write import ADD, CellWrite

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
    "note_only",
)


#: the consistency levels a write is sent at (names of cassandra.ConsistencyLevel)
QUORUM = "QUORUM"
ONE = "ONE"


@dataclass(slots=True, frozen=True)
class Operation:
    """One client request. ``timestamp`` is the USING TIMESTAMP it carries (µs), None when Cassandra picks
    it (LWT, counters). A batch names its tables joined by ',' and the partition of its first statement.

    ``writes`` is every cell, row marker and deletion the request writes, with its TTL: what the verifier
    explains the pipeline's images with. ``consistency`` is the level it is sent at: at ONE a write is
    acknowledged once a single replica has it, so it may sit in one node's commit log alone for a while.
    """

    kind: str
    table: str
    cql: str
    params: tuple[Any, ...]
    timestamp: int | None
    partition: tuple[Any, ...]
    ttl: int | None = None  # the longest USING TTL in the statement, if any
    writes: tuple[CellWrite, ...] = ()
    consistency: str = QUORUM

    @property
    def server_timestamp(self) -> bool:
        """Whether Cassandra picks the write timestamp (LWT: the Paxos ballot; counters: the leader)."""
        return self.timestamp is None

    @property
    def applies_per_attempt(self) -> bool:
        """Whether each attempt that reaches Cassandra may apply anew, visibly: Cassandra picks the
        timestamp, or the request adds to a list (each execution makes new elements, at cell paths the
        coordinator picks, even under one USING TIMESTAMP). Other writes repeat the same cells."""
        return self.server_timestamp or any(w.mode == ADD and isinstance(w.value, list) for w in self.writes)


@dataclass(slots=True, frozen=True)
class Phase:
    """Operations the clients run concurrently, then schema changes made while every client is paused.

    ``after_faults``: run once every fault has fired and recovered (the final stretch, whose TTLs must
    still be running when the workload ends: a fault's recovery would outlast them)."""

    operations: list[Operation]
    schema_change_after: list[str] = field(default_factory=list)
    after_faults: bool = False
